/**
 * The job catalog's directory under a batch's splits (src/catalog/job-catalog.ts), over in-memory
 * KV: thousands of creates applied at once split the last chunk again and again; every link is
 * in the cached directory at once and in the directory in KV once written (the links learnt
 * meanwhile written together), so a later write or read needs no hop along the chain.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { memoryBuckets } from "../../support/memory-buckets.ts";
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

describe("job catalog directory", () => {
  it("learns every chunk a batch's splits make, in the cache at once and in KV", async () => {
    const b = memoryBuckets();
    const catalog = new JobCatalog({
      kv: b.tenants,
      clock: systemClock,
      random: seededRandom(3),
      existing: () => Promise.resolve([]),
    });
    const ids: string[] = [];
    for (let wave = 0; wave < 20; wave++) {
      // 500 creates at once, ids rising as creates' do.
      const batch = Array.from({ length: 500 }, (_, i) => {
        const id = `j${String(wave * 500 + i).padStart(8, "0")}`;
        ids.push(id);
        return { kind: "add" as const, entry: { i: id, n: id, e: true, v: 1, t: 0 } };
      });
      await Promise.all(batch.map((op) => catalog.apply(TENANT, [op])));
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
});
