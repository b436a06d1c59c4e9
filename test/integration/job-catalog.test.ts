/**
 * The job catalog (src/catalog/job-catalog.ts) and the jobs page over it (src/service/jobs-page.ts)
 * on a real nats-server:
 * - three API nodes (three connections, three catalogs with their own caches) adding and removing
 *   entries at once, splitting chunks under each other: no entry lost, none kept after its
 *   remove, the chain in order and the directory naming only chunks of it;
 * - a split cut short (the upper chunk written, the directory not told; an orphan chunk never
 *   linked): reads and writes follow the chain, and the directory is repaired;
 * - crashes between the job write and the catalog write, repaired by the pages that meet them:
 *   an entry whose job never came is hidden, then dropped an hour on; a deleted job's entry is
 *   hidden and dropped; a patch's pending values find the job under its new state and are settled;
 * - a tenant's first list builds the catalog from the jobs that exist;
 * - a filtered read examines a bounded number of entries: short pages with a cursor, and a walk
 *   returns every match once;
 * - the paused index: the cases of test/support/job-lists-suite.ts (which the in-memory KV
 *   passes too, test/unit/catalog/job-lists.test.ts).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { openBuckets, type Buckets } from "../../src/cluster/buckets.ts";
import { decode, encode } from "../../src/cluster/codec.ts";
import type { KvStore } from "../../src/cluster/kv.ts";
import { partitionOf } from "../../src/cluster/placement.ts";
import { systemClock } from "../../src/lib/clock.ts";
import { seededRandom } from "../../src/lib/random.ts";
import {
  ABANDONED_CREATE_MS,
  MAX_CHUNK_ENTRIES,
  type CatalogEntry,
  type Chunk,
  type Directory,
} from "../../src/catalog/catalog-core.ts";
import { JobCatalog, chunkKey, directoryKey } from "../../src/catalog/job-catalog.ts";
import { JobLists, pausedIndexOf } from "../../src/catalog/job-lists.ts";
import { jobsPage } from "../../src/service/jobs-page.ts";
import { describePausedIndex } from "../support/job-lists-suite.ts";
import { emptyJobState, type JobState } from "../../src/job-state/job-state.ts";
import { JOB_ACTOR, jobActorId, newJobId } from "../../src/protocol/ids.ts";
import type { JobView } from "../../src/protocol/model.ts";
import { startNats, type NatsFixture } from "../support/nats.ts";

const PARTITIONS = 16;
let nats: NatsFixture;
const conns: NatsConnection[] = [];
let seq = 0;

/** Fresh buckets of a new cluster name, opened on each of `n` connections (one per "node"). */
async function cluster(n: number): Promise<Buckets[]> {
  const name = `cat${++seq}`;
  const out: Buckets[] = [];
  for (let i = 0; i < n; i++) {
    const nc = await nats.connect(`catalog-${name}-${i}`);
    conns.push(nc);
    out.push(await openBuckets(nc, { clusterName: name, replicas: 1 }));
  }
  return out;
}

const catalogOf = (b: Buckets, seed: number, existing: CatalogEntry[] = []) =>
  new JobCatalog({
    kv: b.tenants,
    clock: systemClock,
    random: seededRandom(seed),
    existing: async () => existing,
  });

const entry = (i: string, n: string | null = null, e = true, t = 1): CatalogEntry => ({
  i,
  n,
  e,
  v: 1,
  t,
});

/** Every entry of the chain, checking it on the way: ranges, order, links. */
async function walkChain(kv: KvStore, tenant: string): Promise<{ ids: string[]; keys: string[] }> {
  const dir = decode<Directory>((await kv.get(directoryKey(tenant)))!.value);
  const ids: string[] = [];
  const keys: string[] = [];
  let key: string | null = dir.chunks[0]![1];
  let lo = "";
  while (key !== null) {
    const c: Chunk = decode<Chunk>((await kv.get(chunkKey(tenant, key)))!.value);
    assert.equal(c.lo, lo, `chunk ${key} starts where the one before ends`);
    for (const e of c.entries) {
      assert.ok(e.i >= c.lo && (c.hi === null || e.i < c.hi), `${e.i} in chunk ${key}'s range`);
      if (ids.length > 0) assert.ok(ids.at(-1)! < e.i, "ids in order, once each");
      ids.push(e.i);
    }
    keys.push(key);
    lo = c.hi ?? "";
    key = c.next;
  }
  for (const [, k] of dir.chunks) assert.ok(keys.includes(k), `directory names ${k} of the chain`);
  return { ids, keys };
}

/** Resolves once the key's value satisfies `ok` (a KV watch: no polling). */
async function until(
  kv: KvStore,
  key: string,
  ok: (v: Uint8Array | null) => boolean,
  what: string,
) {
  const first = await kv.get(key);
  if (ok(first?.value ?? null)) return;
  let stop: (() => void) | undefined;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), 20_000);
    void kv
      .watch(key, (c) => {
        if (ok(c.value)) {
          clearTimeout(timer);
          resolve();
        }
      })
      .then((w) => (stop = () => w.stop()), reject);
  });
  stop?.();
}

const random = seededRandom(99);
const newId = () => newJobId(() => random.next());

before(async () => {
  nats = await startNats();
});
after(async () => {
  for (const nc of conns) await nc.close();
  await nats?.stop();
});

describe("job catalog on NATS", { timeout: 300_000 }, () => {
  it("three nodes adding and removing at once lose nothing and keep nothing removed", async () => {
    const nodes = await cluster(3);
    const catalogs = nodes.map((b, i) => catalogOf(b, i + 1));
    const tenant = "tcat1";
    const perNode = 3 * MAX_CHUNK_ENTRIES; // several splits, made under each other
    const made = catalogs.map(() => Array.from({ length: perNode }, () => newId()));
    const gone = new Set(made.flatMap((ids) => ids.filter((_, i) => i % 5 === 0)));
    await Promise.all(
      catalogs.map(async (c, n) => {
        // 32 at once per node, as concurrent creates arrive; each removed one after its add.
        const ids = made[n]!;
        for (let i = 0; i < ids.length; i += 32) {
          const slice = ids.slice(i, i + 32);
          await Promise.all(
            slice.map(async (id) => {
              await c.apply(tenant, [{ kind: "add", entry: entry(id, `job ${id}`) }]);
              if (gone.has(id)) await c.apply(tenant, [{ kind: "remove", id }]);
            }),
          );
        }
      }),
    );
    const want = made
      .flat()
      .filter((id) => !gone.has(id))
      .sort();
    const { ids, keys } = await walkChain(nodes[0]!.tenants, tenant);
    assert.deepEqual(ids, want);
    assert.ok(keys.length >= 4, `chunks were split (${keys.length})`);
    // A read through any node sees them all, in order.
    const seen: string[] = [];
    let after = "";
    for (;;) {
      const r = await catalogs[2]!.read(tenant, after, { filter: {}, want: 77, maxExamined: 1e9 });
      seen.push(...r.entries.map((e) => e.i));
      if (r.resume === null) break;
      after = r.resume;
    }
    assert.deepEqual(seen, want);
  });

  it("a split cut short: reads and writes follow the chain, and the directory is repaired", async () => {
    const [b] = await cluster(1);
    const kv = b!.tenants;
    const tenant = "tcat2";
    const ids = Array.from({ length: 2 * MAX_CHUNK_ENTRIES }, () => newId());
    await catalogOf(b!, 7).apply(
      tenant,
      ids.map((id) => ({ kind: "add", entry: entry(id) })),
    );
    // The split told the directory after its commit (in the background).
    await until(
      kv,
      directoryKey(tenant),
      (v) => v !== null && decode<Directory>(v).chunks.length >= 2,
      "the directory to learn of the split",
    );
    const full = decode<Directory>((await kv.get(directoryKey(tenant)))!.value);
    // The crash: the directory never learnt of the splits, and one split's upper half was
    // written under a key no chunk links to (its lower half's CAS never landed).
    const e = await kv.get(directoryKey(tenant));
    await kv.update(directoryKey(tenant), encode({ chunks: [full.chunks[0]] }), e!.revision);
    const orphan: Chunk = { lo: "j", hi: null, next: null, entries: [entry("jorphan")] };
    await kv.create(chunkKey(tenant, "orphan"), encode(orphan));

    const fresh = catalogOf(b!, 8); // another node: nothing cached
    const late = newId();
    await fresh.apply(tenant, [
      { kind: "add", entry: entry(late) },
      { kind: "remove", id: ids[ids.length - 1]! },
    ]);
    const want = [...ids.slice(0, -1), late].sort();
    assert.deepEqual((await walkChain(kv, tenant)).ids, want);
    const r = await fresh.read(tenant, "", { filter: {}, want: 1e6, maxExamined: 1e9 });
    assert.deepEqual(
      r.entries.map((x) => x.i),
      want,
      "every entry once; the orphan never",
    );
    await until(
      kv,
      directoryKey(tenant),
      (v) => v !== null && decode<Directory>(v).chunks.length >= full.chunks.length,
      "the directory to learn the chunks it lacked",
    );
    await walkChain(kv, tenant); // and it names only chunks of the chain
  });

  describe("pages repair what a crash left", () => {
    let b: Buckets;
    let catalog: JobCatalog;
    let lists: JobLists;
    const tenant = "tcat3";
    const now = Date.parse("2026-03-01T00:00:00Z");

    const stateKey = (id: string) => {
      const addr = { type: JOB_ACTOR, id: jobActorId(tenant, id) };
      return `${JOB_ACTOR}.${partitionOf(addr, PARTITIONS)}.${addr.id}`;
    };
    /** Writes a job's state as its actor would (name, enabled, version; deleted: a tombstone). */
    const putJob = async (
      id: string,
      name: string,
      enabled: boolean,
      version = 1,
      deleted = false,
    ) => {
      const s: JobState = {
        ...emptyJobState(),
        deleted,
        job: {
          tenant_id: tenant,
          job_id: id,
          spec: {
            name,
            schedule: { at: "2100-01-01T00:00:00Z" },
            task: { image: "busybox", args: ["true"], timeout_s: 10 } as JobView["task"],
            retry: { max_attempts: 1, backoff: "exponential", base_s: 1, max_s: 1 },
            overlap: "skip",
            misfire: { policy: "run_once", starting_deadline_s: null },
            flex_window_s: 0,
            enabled,
          },
          version,
          created_at_ms: now,
          updated_at_ms: now,
          request_hash: "h",
        },
      };
      await b.actors.put(stateKey(id), encode({ s, e: 0, w: "test" }));
    };
    const page = (nowMs: number, o: { name?: string; state?: "enabled" | "paused" } = {}) =>
      jobsPage({ lists, actors: b.actors, partitions: PARTITIONS, nowMs }, tenant, {
        limit: 50,
        ...o,
      });
    const chunkIds = async () => (await walkChain(b.tenants, tenant)).ids;
    /**
     * Resolves once the (one) chunk's entry `id` satisfies `ok` (undefined: not there), in the
     * catalog or (`index`) the paused index.
     */
    const untilEntry = async (
      id: string,
      ok: (e: CatalogEntry | undefined) => boolean,
      what: string,
      index = false,
    ) => {
      const token = index ? pausedIndexOf(tenant) : tenant;
      const dir = decode<Directory>((await b.tenants.get(directoryKey(token)))!.value);
      await until(
        b.tenants,
        chunkKey(token, dir.chunks[0]![1]),
        (v) => v !== null && ok(decode<Chunk>(v).entries.find((x) => x.i === id)),
        what,
      );
    };

    const [kept, neverMade, deleted, paused] = ["ja0", "jb0", "jc0", "jd0"];
    before(async () => {
      [b] = (await cluster(1)) as [Buckets];
      catalog = catalogOf(b, 11);
      lists = new JobLists({
        kv: b.tenants,
        clock: systemClock,
        random: seededRandom(12),
        existing: () => Promise.resolve([]),
      });
      await catalog.apply(tenant, [
        { kind: "add", entry: entry(kept, "nightly report", true, now) },
        { kind: "add", entry: entry(neverMade, "lost create", true, now) },
        { kind: "add", entry: entry(deleted, "old", true, now) },
        { kind: "add", entry: entry(paused, "weekly", true, now) },
      ]);
      await putJob(kept, "nightly report", true);
      await putJob(deleted, "old", true, 2, true); // deleted; its entry's remove never came
      // Paused: the patch marked the entry, then the node died before settling it.
      await catalog.apply(tenant, [{ kind: "pend", id: paused, values: { e: false } }]);
      await putJob(paused, "weekly", false, 2);
    });

    it("hides a job that never came and drops its entry an hour on", async () => {
      assert.deepEqual(
        (await page(now + 1000)).items.map((j) => j.job_id),
        [kept, paused],
      );
      assert.ok((await chunkIds()).includes(neverMade), "a create may still be in flight");
      await page(now + ABANDONED_CREATE_MS + 1000);
      await untilEntry(neverMade, (e) => e === undefined, "the abandoned create's entry to go");
    });

    it("drops a deleted job's entry", async () => {
      await page(now);
      await untilEntry(deleted, (e) => e === undefined, "the deleted job's entry to go");
    });

    it("finds a paused job by its new state through the pending value, then settles it", async () => {
      const p = await page(now, { state: "paused" });
      assert.deepEqual(
        p.items.map((j) => [j.job_id, j.enabled]),
        [[paused, false]],
      );
      assert.deepEqual(
        (await page(now, { state: "enabled", name: "REPORT" })).items.map((j) => j.job_id),
        [kept],
      );
      // The paused page read the paused index (built from the catalog, the pause pending
      // there) and settled its entry; an unfiltered page settles the catalog's.
      await untilEntry(
        paused,
        (e) => e !== undefined && e.p === undefined && e.e === false && e.v === 2,
        "the paused job's index entry to settle",
        true,
      );
      await page(now);
      await untilEntry(
        paused,
        (e) => e !== undefined && e.p === undefined && e.e === false && e.v === 2,
        "the paused job's entry to settle",
      );
    });
  });

  it("a tenant's first use builds the catalog from the jobs that exist", async () => {
    const [b] = await cluster(1);
    const existing = Array.from({ length: MAX_CHUNK_ENTRIES + 30 }, () => entry(newId(), "old"));
    const c = catalogOf(b!, 21, existing);
    const r = await c.read("tcat4", "", { filter: { name: "old" }, want: 1e6, maxExamined: 1e9 });
    assert.deepEqual(
      r.entries.map((e) => e.i),
      existing.map((e) => e.i).sort(),
    );
    assert.ok((await walkChain(b!.tenants, "tcat4")).keys.length >= 2);
  });

  it("a filtered read examines a bounded number of entries; a walk finds every match once", async () => {
    const [b] = await cluster(1);
    const c = catalogOf(b!, 31);
    const ids = Array.from({ length: 5 * MAX_CHUNK_ENTRIES }, () => newId());
    const rare = new Set(ids.filter((_, i) => i % 97 === 0));
    await c.apply(
      "tcat5",
      ids.map((id) => ({ kind: "add", entry: entry(id, rare.has(id) ? "Rare one" : "common") })),
    );
    const found: string[] = [];
    let after = "";
    let reads = 0;
    let short = 0;
    for (;;) {
      const r = await c.read("tcat5", after, {
        filter: { name: "rare" },
        want: 50,
        maxExamined: 300,
      });
      reads++;
      assert.ok(r.examined <= 300 + MAX_CHUNK_ENTRIES + 1, `examined ${r.examined}`);
      if (r.resume !== null && r.entries.length < 50) short++;
      found.push(...r.entries.map((e) => e.i));
      if (r.resume === null) break;
      assert.ok(r.resume > after, "each read moves on");
      after = r.resume;
    }
    assert.deepEqual(found, [...rare].sort());
    assert.ok(short > 0 && reads >= 3, `short pages with a cursor (${short} of ${reads})`);
  });
});

describePausedIndex("JetStream KV", async () => {
  const [b] = await cluster(1);
  return { tenants: b!.tenants, actors: b!.actors };
});
