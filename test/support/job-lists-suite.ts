/**
 * The paused index (src/catalog/job-lists.ts) through the jobs page (src/service/jobs-page.ts),
 * run over a KV port given by the caller: the in-memory one (test/unit/catalog/job-lists.test.ts)
 * and JetStream KV (test/integration/job-catalog.test.ts) pass the same cases.
 * - a `state=paused` page reads the index: the paused jobs in id order, each once, a few chunk
 *   reads a page however few of the tenant's jobs are paused;
 * - a pause and a resume move a job into and out of the index; a pause in flight is neither
 *   lost nor shown early; a crash between a patch and its settle loses nothing;
 * - an entry whose job is enabled leaves at the first page that meets it;
 * - a tenant whose catalog predates its index: the index is built from the catalog.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { KvStore } from "../../src/cluster/kv.ts";
import { decode, encode } from "../../src/cluster/codec.ts";
import { partitionOf } from "../../src/cluster/placement.ts";
import { systemClock } from "../../src/lib/clock.ts";
import { seededRandom } from "../../src/lib/random.ts";
import type { CatalogEntry, Chunk, Directory } from "../../src/catalog/catalog-core.ts";
import { JobCatalog, chunkKey, directoryKey } from "../../src/catalog/job-catalog.ts";
import { JobLists, pausedIndexOf } from "../../src/catalog/job-lists.ts";
import { jobsPage } from "../../src/service/jobs-page.ts";
import { emptyJobState, type JobState } from "../../src/job-state/job-state.ts";
import { JOB_ACTOR, jobActorId } from "../../src/protocol/ids.ts";
import type { JobView } from "../../src/protocol/model.ts";
import { countedKv } from "./memory-buckets.ts";

const PARTITIONS = 16;
const NOW = Date.parse("2026-03-01T00:00:00Z");

/** Fresh `tenants` and `actors` buckets for one case. */
export type OpenBuckets = () => Promise<{ tenants: KvStore; actors: KvStore }>;

export function describePausedIndex(port: string, open: OpenBuckets): void {
  describe(`paused index over ${port}`, { timeout: 120_000 }, () => {
    let seq = 0;
    async function setUp() {
      const { tenants, actors } = await open();
      const counted = countedKv(tenants);
      const tenant = `tpaus${String(++seq).padStart(11, "0")}`;
      const lists = new JobLists({
        kv: counted.kv,
        clock: systemClock,
        random: seededRandom(seq),
        existing: () => Promise.resolve([]),
      });
      const stateKey = (id: string) => {
        const addr = { type: JOB_ACTOR, id: jobActorId(tenant, id) };
        return `${JOB_ACTOR}.${partitionOf(addr, PARTITIONS)}.${addr.id}`;
      };
      /** Writes a job's state as its actor would. */
      const putJob = async (id: string, name: string, enabled: boolean, version = 1) => {
        const s: JobState = {
          ...emptyJobState(),
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
            created_at_ms: NOW,
            updated_at_ms: NOW,
            request_hash: "h",
          },
        };
        await actors.put(stateKey(id), encode({ s, e: 0, w: "test" }));
      };
      /** A create as the service makes it: entries first, then the job. */
      const create = async (id: string, name: string, enabled: boolean) => {
        await lists.listNew(tenant, { i: id, n: name, e: enabled, v: 1, t: NOW });
        await putJob(id, name, enabled);
      };
      const page = (
        o: { name?: string; state?: "enabled" | "paused"; cursor?: string; limit?: number } = {},
        nowMs = NOW,
      ) => jobsPage({ lists, actors, partitions: PARTITIONS, nowMs }, tenant, { limit: 50, ...o });
      const ids = async (o: Parameters<typeof page>[0] = {}, nowMs = NOW) =>
        (await page(o, nowMs)).items.map((j) => j.job_id);
      /** The index's entries (its whole chain), or null before it is built. */
      const indexed = async (): Promise<CatalogEntry[] | null> => {
        const d = await tenants.get(directoryKey(pausedIndexOf(tenant)));
        if (d === null) return null;
        const out: CatalogEntry[] = [];
        let key: string | null = decode<Directory>(d.value).chunks[0]![1];
        while (key !== null) {
          const c: Chunk = decode<Chunk>(
            (await tenants.get(chunkKey(pausedIndexOf(tenant), key)))!.value,
          );
          out.push(...c.entries);
          key = c.next;
        }
        return out;
      };
      /** Resolves once the index's entry `id` satisfies `ok` (repairs go on in the background). */
      const untilIndexed = async (id: string, ok: (e: CatalogEntry | undefined) => boolean) => {
        for (let i = 0; i < 500; i++) {
          if (ok((await indexed())?.find((e) => e.i === id))) return;
          await new Promise<void>((r) => setImmediate(r));
        }
        assert.fail(
          `the index entry of ${id} never came right: ${JSON.stringify(await indexed())}`,
        );
      };
      return {
        tenants,
        actors,
        counted,
        tenant,
        lists,
        putJob,
        create,
        page,
        ids,
        indexed,
        untilIndexed,
      };
    }

    it("a paused page reads the index: each paused job once, in id order, O(page) reads", async () => {
      const t = await setUp();
      const all = Array.from({ length: 1200 }, (_, i) => `j${String(i).padStart(8, "0")}`);
      const paused = all.filter((_, i) => i % 97 === 3);
      for (let i = 0; i < all.length; i += 100)
        await Promise.all(
          all.slice(i, i + 100).map((id, k) => t.create(id, `job ${i + k}`, !paused.includes(id))),
        );
      t.counted.ops.clear();
      assert.deepEqual(await t.ids({ state: "paused", limit: 5 }), paused.slice(0, 5));
      const gets = t.counted.ops.get("get") ?? 0;
      assert.ok(gets <= 3, `a paused page read ${gets} keys of the tenants bucket`);
      // Every paused job once, across pages; with a name part too.
      const walked: string[] = [];
      let cursor: string | undefined;
      do {
        const p = await t.page({ state: "paused", limit: 4, ...(cursor ? { cursor } : {}) });
        walked.push(...p.items.map((j) => j.job_id));
        cursor = p.next_cursor ?? undefined;
      } while (cursor !== undefined);
      assert.deepEqual(walked, paused);
      assert.deepEqual(await t.ids({ state: "paused", name: "JOB 3" }), ["j00000003", "j00000391"]);
      // Other filters read the catalog, as before.
      assert.equal((await t.ids({ state: "enabled", limit: 200 })).length, 200);
    });

    it("a pause and a resume move a job in and out; a pause in flight is not lost", async () => {
      const t = await setUp();
      await t.create("ja", "nightly", true);
      assert.deepEqual(await t.ids({ state: "paused" }), []);
      // The pause's patch is in flight: marked, not applied.
      await t.lists.beforePatch(t.tenant, "ja", { e: false });
      assert.deepEqual(await t.ids({ state: "paused" }), [], "not shown before it applies");
      await t.page({ state: "paused" }); // a page meets it while the job is still enabled
      // Pages long after the job was made: the pending pause is still never dropped.
      for (let i = 0; i < 2; i++) await t.page({ state: "paused" }, NOW + 2 * 3_600_000);
      const kept = (await t.indexed())!.find((e) => e.i === "ja");
      assert.ok(kept !== undefined, "a pause in flight keeps its entry");
      await t.putJob("ja", "nightly", false, 2); // applied; its settle never comes (a crash)
      assert.deepEqual(await t.ids({ state: "paused" }), ["ja"]);
      await t.untilIndexed("ja", (e) => e?.e === false && e.p === undefined && e.v === 2);
      // A resume: applied and settled, the entry leaves.
      await t.lists.beforePatch(t.tenant, "ja", { e: true });
      await t.putJob("ja", "nightly", true, 3);
      await t.lists.afterPatch(t.tenant, "ja", { n: "nightly", e: true }, 3);
      assert.equal(
        (await t.indexed())!.find((e) => e.i === "ja"),
        undefined,
      );
      assert.deepEqual(await t.ids({ state: "paused" }), []);
      // A pause applied and settled, with a rename.
      await t.lists.beforePatch(t.tenant, "ja", { e: false, n: "weekly" });
      await t.putJob("ja", "weekly", false, 4);
      await t.lists.afterPatch(t.tenant, "ja", { n: "weekly", e: false }, 4);
      assert.deepEqual(await t.ids({ state: "paused", name: "week" }), ["ja"]);
      assert.deepEqual(await t.ids({ state: "paused", name: "night" }), []);
    });

    it("an enabled job's entry leaves at the first page; a deleted job's goes too", async () => {
      const t = await setUp();
      await t.create("jb", "left over", false);
      await t.create("jc", "gone", false);
      await t.putJob("jb", "left over", true, 2); // resumed; its settle never came
      await t.lists.unlist(t.tenant, "jc");
      assert.deepEqual(await t.ids({ state: "paused" }), []);
      await t.untilIndexed("jb", (e) => e === undefined);
      // A job read older than its entry (a replica behind: enabled at 1, paused at 5) stays.
      await t.create("jd", "paused", false);
      await t.lists.afterPatch(t.tenant, "jd", { n: "paused", e: false }, 5);
      await t.putJob("jd", "paused", true, 1);
      assert.deepEqual(await t.ids({ state: "paused" }), []);
      assert.ok(
        (await t.indexed())!.some((e) => e.i === "jd"),
        "kept: the job read is older",
      );
    });

    it("a catalog that predates the index: the first paused page builds the index", async () => {
      const t = await setUp();
      const catalog = new JobCatalog({
        kv: t.tenants,
        clock: systemClock,
        random: seededRandom(77),
        existing: () => Promise.resolve([]),
      });
      const entry = (i: string, e: boolean): CatalogEntry => ({ i, n: i, e, v: 1, t: NOW });
      await catalog.apply(t.tenant, [
        { kind: "add", entry: entry("je", true) },
        { kind: "add", entry: entry("jf", false) },
        { kind: "add", entry: entry("jg", true) },
        { kind: "pend", id: "jg", values: { e: false } }, // a pause in flight
      ]);
      await t.putJob("je", "je", true);
      await t.putJob("jf", "jf", false);
      await t.putJob("jg", "jg", false, 2);
      assert.equal(await t.indexed(), null);
      assert.deepEqual(await t.ids({ state: "paused" }), ["jf", "jg"]);
      assert.deepEqual(
        (await t.indexed())!.map((e) => e.i),
        ["jf", "jg"],
      );
    });
  });
}
