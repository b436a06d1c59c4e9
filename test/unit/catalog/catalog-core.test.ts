/**
 * The job catalog's pure logic (src/catalog/catalog-core.ts): ops on a chunk (add is idempotent,
 * pending values widen a filter until settled, settle never goes back a version, remove), ops past
 * a chunk's range handed on, the split in halves, the directory's guess, building a chain from
 * existing jobs, filters and the verdict a page draws from a job's state.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  ABANDONED_CREATE_MS,
  MAX_CHUNK_ENTRIES,
  MAX_PENDING,
  applyOps,
  buildChain,
  covers,
  entryMatches,
  keysAfter,
  locate,
  split,
  verdict,
  withChunk,
  type CatalogEntry,
  type Chunk,
  type Directory,
} from "../../../src/catalog/catalog-core.ts";
import { positionBefore } from "../../../src/catalog/job-catalog.ts";

const entry = (i: string, n: string | null = null, e = true, v = 1): CatalogEntry => ({
  i,
  n,
  e,
  v,
  t: 1000,
});
const chunk = (entries: CatalogEntry[], lo = "", hi: string | null = null): Chunk => ({
  lo,
  hi,
  next: hi === null ? null : "nx",
  entries,
});
const ids = (c: Chunk | null) => c?.entries.map((e) => e.i);

describe("catalog chunk ops", () => {
  it("adds in id order; a second add of one id changes nothing", () => {
    const a = applyOps(chunk([entry("jb")]), [
      { kind: "add", entry: entry("jc") },
      { kind: "add", entry: entry("ja") },
    ]);
    assert.deepEqual(ids(a.chunk), ["ja", "jb", "jc"]);
    const again = applyOps(a.chunk!, [{ kind: "add", entry: entry("jb", "other") }]);
    assert.equal(again.chunk, null, "a replayed create leaves the entry as it is");
  });

  it("hands on the ops past the chunk's range", () => {
    const c = chunk([entry("ja")], "", "jm");
    const r = applyOps(c, [
      { kind: "add", entry: entry("jz") },
      { kind: "remove", id: "ja" },
    ]);
    assert.deepEqual(ids(r.chunk), []);
    assert.deepEqual(
      r.beyond.map((o) => o.kind),
      ["add"],
    );
    assert.equal(covers(c, "jm"), false);
    assert.equal(covers(c, "jl"), true);
  });

  it("a pending value widens the filter until settled; settle never goes back a version", () => {
    let c = chunk([entry("ja", "nightly", true, 3)]);
    c = applyOps(c, [{ kind: "pend", id: "ja", values: { e: false } }]).chunk!;
    const e = c.entries[0]!;
    assert.deepEqual(e.p, [{ n: "nightly", e: false }], "the unchanged name is kept");
    assert.ok(entryMatches(e, { state: "paused" }) && entryMatches(e, { state: "enabled" }));
    assert.equal(
      applyOps(c, [{ kind: "pend", id: "ja", values: { e: false } }]).chunk,
      null,
      "the same pending values twice: once",
    );
    const old = applyOps(c, [
      { kind: "settle", id: "ja", values: { n: "x", e: true }, v: 2 },
    ]).chunk;
    assert.equal(old, null, "an older version does not settle");
    c = applyOps(c, [
      { kind: "settle", id: "ja", values: { n: "nightly", e: false }, v: 4 },
    ]).chunk!;
    assert.deepEqual(c.entries[0], { i: "ja", n: "nightly", e: false, v: 4, t: 1000 });
    assert.ok(!entryMatches(c.entries[0], { state: "enabled" }));
  });

  it("keeps at most MAX_PENDING pending values (the newest)", () => {
    let c = chunk([entry("ja", "n0")]);
    for (let i = 1; i <= MAX_PENDING + 2; i++)
      c = applyOps(c, [{ kind: "pend", id: "ja", values: { n: `n${i}` } }]).chunk!;
    const p = c.entries[0]!.p!;
    assert.equal(p.length, MAX_PENDING);
    assert.equal(p.at(-1)!.n, `n${MAX_PENDING + 2}`);
  });

  it("a pending null name is a name removed", () => {
    const c = applyOps(chunk([entry("ja", "n0")]), [
      { kind: "pend", id: "ja", values: { n: null } },
    ]).chunk!;
    assert.deepEqual(c.entries[0]!.p, [{ n: null, e: true }]);
  });

  it("removes; an op on an id that is not there changes nothing", () => {
    const c = chunk([entry("ja"), entry("jb")]);
    assert.deepEqual(ids(applyOps(c, [{ kind: "remove", id: "ja" }]).chunk), ["jb"]);
    assert.equal(applyOps(c, [{ kind: "remove", id: "jz" }]).chunk, null);
    assert.equal(applyOps(c, [{ kind: "pend", id: "jz", values: { e: false } }]).chunk, null);
  });

  it("a job enabled at a version leaves the paused index, unless later or a pause is pending", () => {
    const c = chunk([entry("ja", "n", false, 2), entry("jb", "n", false, 5)]);
    // Enabled at 3: ja (written at 2) leaves; jb (written at 5, a later pause) stays.
    const left = applyOps(c, [
      { kind: "leave", id: "ja", v: 3 },
      { kind: "leave", id: "jb", v: 3 },
    ]);
    assert.deepEqual(ids(left.chunk), ["jb"]);
    // A pause pending (a patch in flight since the page read the job) keeps it; a pending
    // rename or resume does not.
    const paused = applyOps(c, [{ kind: "pend", id: "ja", values: { e: false, n: "m" } }]).chunk!;
    assert.equal(applyOps(paused, [{ kind: "leave", id: "ja", v: 3 }]).chunk, null);
    const resumed = applyOps(c, [{ kind: "pend", id: "ja", values: { e: true } }]).chunk!;
    assert.deepEqual(ids(applyOps(resumed, [{ kind: "leave", id: "ja", v: 3 }]).chunk), ["jb"]);
  });
});

describe("catalog chain", () => {
  it("splits a chunk over the size in halves linked by next", () => {
    const entries = Array.from({ length: MAX_CHUNK_ENTRIES + 1 }, (_, i) =>
      entry(`j${String(i).padStart(4, "0")}`),
    );
    assert.equal(split(chunk(entries.slice(0, -1)), "k2"), null);
    const s = split({ lo: "", hi: "jz", next: "k9", entries }, "k2")!;
    const mid = entries[entries.length >> 1]!.i;
    assert.deepEqual(
      [s.lower.lo, s.lower.hi, s.lower.next, s.upper.lo, s.upper.hi, s.upper.next],
      ["", mid, "k2", mid, "jz", "k9"],
    );
    assert.equal(s.lower.entries.length + s.upper.entries.length, entries.length);
    assert.ok(s.lower.entries.every((e) => e.i < mid) && s.upper.entries.every((e) => e.i >= mid));
  });

  it("splits a chunk that grew at its end after its earlier entries; in halves otherwise", () => {
    const entries = Array.from({ length: MAX_CHUNK_ENTRIES + 30 }, (_, i) =>
      entry(`j${String(i).padStart(4, "0")}`),
    );
    const c = { lo: "", hi: "jz", next: "k9", entries };
    const had = MAX_CHUNK_ENTRIES - 10; // entries before the write; 40 appended after them
    const s = split(c, "k2", entries[had - 1]!.i)!;
    assert.equal(s.lower.entries.length, had);
    assert.equal(s.lower.hi, entries[had]!.i);
    assert.deepEqual(s.upper.entries, entries.slice(had));
    assert.deepEqual(
      [s.lower.next, s.upper.lo, s.upper.hi, s.upper.next],
      ["k2", entries[had]!.i, "jz", "k9"],
    );
    // Grown in the middle (the last id before the write is the last one now), or mostly new: halves.
    const half = entries.length >> 1;
    assert.equal(split(c, "k2", entries[entries.length - 1]!.i)!.lower.entries.length, half);
    assert.equal(split(c, "k2", entries[10]!.i)!.lower.entries.length, half);
    // More than a chunk's worth at or below it (a big group mostly below): halves.
    const big = Array.from({ length: 3 * MAX_CHUNK_ENTRIES }, (_, i) =>
      entry(`j${String(i).padStart(4, "0")}`),
    );
    const bigSplit = split({ ...c, entries: big }, "k2", big[2 * MAX_CHUNK_ENTRIES]!.i)!;
    assert.equal(bigSplit.lower.entries.length, big.length >> 1);
    // An id between entries (one removed meanwhile) cuts after the entries below it.
    assert.equal(split(c, "k2", `${entries[had - 1]!.i}~`)!.lower.entries.length, had);
  });

  it("the directory names the last chunk at or below an id; a stale one names an earlier chunk", () => {
    let d: Directory = { chunks: [["", "a"]] };
    d = withChunk(d, "jm", "b");
    d = withChunk(d, "jf", "c");
    assert.deepEqual(
      d.chunks.map(([l]) => l),
      ["", "jf", "jm"],
    );
    assert.equal(withChunk(d, "jf", "c"), d, "known already: the same directory");
    assert.deepEqual(
      ["j0", "jf", "jg", "jm", "jz"].map((id) => locate(d, id)),
      ["a", "c", "c", "b", "b"],
    );
    assert.deepEqual(keysAfter(d, "", 5), ["c", "b"]);
    assert.deepEqual(keysAfter(d, "jf", 5), ["b"]);
  });

  it("builds a chain of half-full chunks from existing jobs, covering every id once", () => {
    const n = MAX_CHUNK_ENTRIES * 2 + 7;
    const entries = Array.from({ length: n }, (_, i) => entry(`j${(n - i) * 7919}`));
    let k = 0;
    const { chunks, directory } = buildChain(entries, () => `k${k++}`);
    assert.equal(chunks.length, Math.ceil(n / (MAX_CHUNK_ENTRIES >> 1)));
    assert.equal(chunks[0]!.chunk.lo, "");
    assert.equal(chunks.at(-1)!.chunk.hi, null);
    for (let i = 0; i + 1 < chunks.length; i++) {
      assert.equal(chunks[i]!.chunk.next, chunks[i + 1]!.key);
      assert.equal(chunks[i]!.chunk.hi, chunks[i + 1]!.chunk.lo);
    }
    const all = chunks.flatMap((c) => c.chunk.entries.map((e) => e.i));
    assert.deepEqual(all, [...entries.map((e) => e.i)].sort());
    for (const c of chunks) assert.ok(c.chunk.entries.every((e) => covers(c.chunk, e.i)));
    assert.deepEqual(
      directory.chunks.map(([, key]) => key),
      chunks.map((c) => c.key),
    );
    const empty = buildChain([], () => "k");
    assert.deepEqual(empty.chunks, [
      { key: "k", chunk: { lo: "", hi: null, next: null, entries: [] } },
    ]);
  });

  it("a position before a chunk's bound comes after every id below it", () => {
    const hi = "jk3a0";
    const p = positionBefore(hi);
    assert.ok(p < hi);
    for (const id of ["jk39zzzzzzzzzzzzz", "jk39", "jk3", "jk2zzzzzzz", "jk3_", "jk39-"])
      assert.ok(id <= p, `${id} <= ${p}`);
  });
});

describe("catalog filters and verdicts", () => {
  it("matches a name part in any case, and the state", () => {
    const e = entry("ja", "Nightly Report", false);
    assert.ok(entryMatches(e, {}));
    assert.ok(entryMatches(e, { name: "report" }));
    assert.ok(entryMatches(e, { name: "nightly r", state: "paused" }));
    assert.ok(!entryMatches(e, { name: "report", state: "enabled" }));
    assert.ok(!entryMatches(entry("jb", null), { name: "a" }), "no name: no name match");
  });

  it("shows a matching job, hides others, repairs what disagrees with the job", () => {
    const job = (n: string | null, e: boolean, v: number, deleted = false) => ({
      deleted,
      values: { n, e },
      v,
    });
    const now = 10_000_000;
    const e = { ...entry("ja", "a", true, 2), t: now - 10 };
    assert.deepEqual(verdict(e, job("a", true, 2), {}, now), { kind: "show" });
    assert.deepEqual(verdict(e, job("a", true, 2), { state: "paused" }, now), { kind: "hide" });
    assert.deepEqual(verdict(e, null, {}, now), { kind: "hide" }, "a create in flight");
    assert.deepEqual(verdict(e, null, {}, now + ABANDONED_CREATE_MS + 1), {
      kind: "repair",
      op: { kind: "remove", id: "ja" },
      show: false,
    });
    assert.deepEqual(verdict(e, job("a", true, 2, true), {}, now), {
      kind: "repair",
      op: { kind: "remove", id: "ja" },
      show: false,
    });
    assert.deepEqual(verdict(e, job("b", false, 3), { state: "paused" }, now), {
      kind: "repair",
      op: { kind: "settle", id: "ja", values: { n: "b", e: false }, v: 3 },
      show: true,
    });
    const pending = { ...e, p: [{ n: "a", e: false }] };
    assert.equal(verdict(pending, job("a", true, 2), {}, now).kind, "repair", "pending dropped");
    assert.deepEqual(
      verdict({ ...e, v: 5 }, job("z", true, 4), {}, now),
      { kind: "show" },
      "a job read behind the entry: no repair backwards",
    );
  });
});
