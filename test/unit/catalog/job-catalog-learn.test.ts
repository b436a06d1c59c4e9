/**
 * The job catalog's directory under a batch's splits (src/catalog/job-catalog.ts), over in-memory
 * KV: thousands of creates applied at once split the last chunk again and again; every link is
 * in the cached directory at once (a read of the newest jobs right after a wave reads one chunk,
 * no hop) and in the directory in KV once written, the links learnt meanwhile written together
 * by one CAS at a time (the node's directory writes never conflict with each other), so a later
 * write or read needs no hop along the chain.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { memoryBuckets } from "../../support/memory-buckets.ts";
import type { KvEntry, ReadOptions, WriteOptions, WriteResult } from "../../../src/cluster/kv.ts";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { decode } from "../../../src/cluster/codec.ts";
import { systemClock } from "../../../src/lib/clock.ts";
import { seededRandom } from "../../../src/lib/random.ts";
import type { Chunk, Directory } from "../../../src/catalog/catalog-core.ts";
import { JobCatalog, chunkKey, directoryKey } from "../../../src/catalog/job-catalog.ts";

const TENANT = "tlearnlearnlearn";

/** The directory in KV, read until it names `n` chunks (its writes go on in the background). */
async function directoryNaming(kv: ReturnType<typeof memoryBuckets>["tenants"], n: number) {
  for (let i = 0; i < 200; i++) {
    const e = await kv.get(directoryKey(TENANT));
    const d = e === null ? null : decode<Directory>(e.value);
    if (d !== null && d.chunks.length >= n) return d;
    await new Promise<void>((r) => setImmediate(r));
  }
  assert.fail(`the directory never named ${n} chunks`);
}

/** A turn of the event loop: a round trip's worth of other work goes on meanwhile. */
const roundTrip = () => new Promise<void>((r) => setImmediate(r));

/**
 * The tenants bucket with a round trip per read and write (as over NATS: without one, a CAS of
 * the in-memory KV completes before anything else runs, and no two ever overlap), counting the
 * directory's conflicting CAS writes and the chunks read (a read that hops reads more than one).
 */
class WatchedTenants extends MemoryKv {
  dirConflicts = 0;
  chunkGets = 0;

  override async get(key: string, opts?: ReadOptions): Promise<KvEntry | null> {
    if (key.startsWith(`jl.${TENANT}.`)) this.chunkGets++;
    await roundTrip();
    return super.get(key, opts);
  }

  override async create(key: string, value: Uint8Array): Promise<WriteResult> {
    await roundTrip();
    return super.create(key, value);
  }

  override async update(
    key: string,
    value: Uint8Array,
    rev: number,
    opts?: WriteOptions,
  ): Promise<WriteResult> {
    await roundTrip();
    const r = await super.update(key, value, rev, opts);
    if (!r.ok && key === directoryKey(TENANT)) this.dirConflicts++;
    return r;
  }
}

/** A catalog of TENANT over `t`, a tenant created with it (no listing to learn from). */
function catalogOn(t: MemoryKv, seed: number) {
  const b = memoryBuckets({ tenants: t });
  const catalog = new JobCatalog({
    kv: b.tenants,
    clock: systemClock,
    random: seededRandom(seed),
    existing: () => Promise.resolve([]),
  });
  return { b, catalog };
}

/** Adds `n` jobs at once, their ids rising as creates' do (appended to `ids`). */
async function addWave(catalog: JobCatalog, ids: string[], n: number): Promise<void> {
  const batch = Array.from({ length: n }, () => {
    const id = `j${String(ids.length).padStart(8, "0")}`;
    ids.push(id);
    return { kind: "add" as const, entry: { i: id, n: id, e: true, v: 1, t: 0 } };
  });
  await Promise.all(batch.map((op) => catalog.apply(TENANT, [op])));
}

/** The ids a read after the third newest job lists, and the chunks that read fetched. */
async function readNewest(
  catalog: JobCatalog,
  t: WatchedTenants,
  ids: readonly string[],
): Promise<{ listed: string[]; chunkGets: number }> {
  const before = t.chunkGets;
  const page = await catalog.read(TENANT, ids[ids.length - 3]!, {
    filter: {},
    want: 10,
    maxExamined: 1000,
  });
  return { listed: page.entries.map((e) => e.i), chunkGets: t.chunkGets - before };
}

describe("job catalog directory", () => {
  it("learns every chunk a batch's splits make, in the cache at once and in KV", async () => {
    const t = new WatchedTenants("tenants");
    const { b, catalog } = catalogOn(t, 3);
    const ids: string[] = [];
    for (let wave = 0; wave < 20; wave++) {
      await addWave(catalog, ids, 500);
      // The splits' links are in the cached directory as the creates return: a read of the
      // newest jobs starts at their chunk (a lagging cache starts earlier and hops).
      const newest = await readNewest(catalog, t, ids);
      assert.deepEqual(newest.listed, ids.slice(-2), `wave ${wave}`);
      assert.equal(newest.chunkGets, 1, `wave ${wave}: chunks read for the newest jobs`);
    }
    // The chain, from the first chunk.
    const chain: string[] = [];
    const d0 = decode<Directory>((await b.tenants.get(directoryKey(TENANT)))!.value);
    let key: string | null = d0.chunks[0]![1];
    let listed = 0;
    while (key !== null) {
      chain.push(key);
      const c: Chunk = decode<Chunk>((await b.tenants.get(chunkKey(TENANT, key)))!.value);
      listed += c.entries.length;
      key = c.next;
    }
    assert.equal(listed, ids.length, "every create listed once");
    const d = await directoryNaming(b.tenants, chain.length);
    assert.deepEqual(
      d.chunks.map(([, k]) => k),
      chain,
      "the directory names every chunk of the chain, in order",
    );
    // One writer of the directory at a time on this node: none of its CASes lost to another.
    assert.equal(t.dirConflicts, 0, "the node's directory writes that conflicted");
    // A read of the last page starts at the right chunk: no hop (a hop would learn a link, and
    // the read would find a chunk the directory lacks).
    const last = await catalog.read(TENANT, ids[ids.length - 2]!, {
      filter: {},
      want: 10,
      maxExamined: 1000,
    });
    assert.deepEqual(
      last.entries.map((e) => e.i),
      [ids[ids.length - 1]],
    );
  });

  it("keeps in the cache a link learnt while a directory write was in flight, once that write lands", async () => {
    // Directory writes held until released, one at a time.
    const held: (() => void)[] = [];
    class HeldDirectory extends WatchedTenants {
      override async update(key: string, value: Uint8Array, rev: number, opts?: WriteOptions) {
        if (key === directoryKey(TENANT)) await new Promise<void>((r) => held.push(r));
        return super.update(key, value, rev, opts);
      }
    }
    const t = new HeldDirectory("tenants");
    const { catalog } = catalogOn(t, 5);
    const ids: string[] = [];
    const wave = (n: number) => addWave(catalog, ids, n);
    const heldWrite = async () => {
      for (let i = 0; i < 200 && held.length === 0; i++) await roundTrip();
      assert.equal(held.length, 1, "one directory write waits");
    };
    await wave(300); // a split: its link's directory write is held
    await heldWrite();
    await wave(300); // another split meanwhile: its link queued for the next write
    held.shift()!(); // the first write lands; the second is held in turn
    await heldWrite();
    const newest = await readNewest(catalog, t, ids);
    assert.deepEqual(newest.listed, ids.slice(-2));
    assert.equal(newest.chunkGets, 1, "the newest jobs' chunk read at once, no hop");
    while (held.length > 0) held.shift()!();
  });
});
