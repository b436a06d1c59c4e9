/**
 * The KV port's conformance suite: the same cases run against MemoryKv and against NatsKv on a
 * real nats-server (single server, and a 3-server cluster with an R3 bucket). The in-memory
 * port may serve simulations only because it passes this suite.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { MemoryKv } from "../../src/cluster/kv-memory.ts";
import { systemClock } from "../../src/lib/clock.ts";
import { seededRandom } from "../../src/lib/random.ts";
import { FaultyKv, KvView } from "../sim/faulty-kv.ts";
import type { KvChange, KvStore } from "../../src/cluster/kv.ts";
import { openBuckets } from "../../src/cluster/buckets.ts";
import { startNats, startNatsCluster, type NatsFixture } from "../support/nats.ts";

const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);
let unique = 0;
const k = (base: string) => `${base}.${++unique}`;

function conformance(name: string, getKv: () => KvStore): void {
  describe(`KvStore conformance: ${name}`, () => {
    it("create writes once; a second create is a conflict, not an exception", async () => {
      const kv = getKv();
      const key = k("c");
      const a = await kv.create(key, enc("a"));
      assert.equal(a.ok, true);
      const b = await kv.create(key, enc("b"));
      assert.deepEqual(b, { ok: false, conflict: "exists" });
      assert.equal(dec((await kv.get(key))!.value), "a");
    });

    it("update succeeds only at the expected revision; revisions grow", async () => {
      const kv = getKv();
      const key = k("u");
      const a = await kv.create(key, enc("1"));
      assert.ok(a.ok);
      const b = await kv.update(key, enc("2"), a.revision);
      assert.ok(b.ok && b.revision > a.revision);
      const stale = await kv.update(key, enc("3"), a.revision);
      assert.deepEqual(stale, { ok: false, conflict: "revision_mismatch" });
      const e = await kv.get(key);
      assert.equal(dec(e!.value), "2");
      assert.equal(e!.revision, b.ok ? b.revision : -1);
    });

    it("racing CAS writes with the same revision: exactly one wins", async () => {
      const kv = getKv();
      const key = k("race");
      const a = await kv.create(key, enc("0"));
      assert.ok(a.ok);
      const results = await Promise.all(
        Array.from({ length: 8 }, (_, i) => kv.update(key, enc(`w${i}`), a.revision)),
      );
      assert.equal(results.filter((r) => r.ok).length, 1);
    });

    it("get of a missing or deleted key is null; create works again after delete", async () => {
      const kv = getKv();
      const key = k("d");
      assert.equal(await kv.get(key), null);
      const a = await kv.create(key, enc("x"));
      assert.ok(a.ok);
      assert.deepEqual(await kv.delete(key, a.revision + 100), { ok: false, conflict: "revision_mismatch" });
      assert.equal((await kv.delete(key, a.revision)).ok, true);
      assert.equal(await kv.get(key), null);
      const again = await kv.create(key, enc("y"));
      assert.ok(again.ok && again.revision > a.revision);
    });

    it("list returns live entries matching a filter, in revision order", async () => {
      const kv = getKv();
      const base = k("l");
      await kv.put(`${base}.a.1`, enc("1"));
      await kv.put(`${base}.b.2`, enc("2"));
      await kv.put(`${base}.a.3`, enc("3"));
      const gone = await kv.create(`${base}.a.4`, enc("4"));
      assert.ok(gone.ok);
      await kv.delete(`${base}.a.4`);
      const got = await kv.list(`${base}.a.*`);
      assert.deepEqual(got.map((e) => e.key), [`${base}.a.1`, `${base}.a.3`]);
      assert.deepEqual((await kv.list(`${base}.>`)).length, 3);
      assert.deepEqual(await kv.list(`${base}.zzz.>`), []);
    });

    it("scan pages live entries after a revision, in revision order, skipping deletes", async () => {
      const kv = getKv();
      const base = k("s");
      const revs: number[] = [];
      for (const n of ["1", "2", "3", "4", "5"]) revs.push(await kv.put(`${base}.a.${n}`, enc(n)));
      await kv.put(`${base}.b.9`, enc("9"));
      await kv.delete(`${base}.a.3`);
      const p1 = await kv.scan(`${base}.a.*`, 0, 2);
      assert.deepEqual(p1.entries.map((e) => dec(e.value)), ["1", "2"]);
      assert.equal(p1.next, revs[1]);
      const p2 = await kv.scan(`${base}.a.*`, p1.next, 2);
      assert.deepEqual(p2.entries.map((e) => [e.key, dec(e.value)]), [[`${base}.a.4`, "4"], [`${base}.a.5`, "5"]]);
      assert.equal(p2.next, null);
      assert.deepEqual(await kv.scan(`${base}.a.*`, revs[4]!, 2), { entries: [], next: null });
      assert.deepEqual(await kv.scan(`${base}.zzz.>`, 0, 10), { entries: [], next: null });
    });

    it("watch replays current values, signals ready, then streams changes and deletes", async () => {
      const kv = getKv();
      const base = k("w");
      await kv.put(`${base}.x`, enc("1"));
      const seen: KvChange[] = [];
      let readyAt = -1;
      let notify: (() => void) | undefined;
      const w = await kv.watch(`${base}.>`, (c) => {
        seen.push(c);
        notify?.();
      }, () => {
        readyAt = seen.length;
      });
      const waitFor = (n: number) =>
        new Promise<void>((resolve) => {
          if (seen.length >= n) return resolve();
          notify = () => seen.length >= n && resolve();
        });
      await waitFor(1);
      assert.equal(readyAt, 1);
      await kv.put(`${base}.y`, enc("2"));
      await kv.delete(`${base}.x`);
      await waitFor(3);
      w.stop();
      assert.deepEqual(seen.map((c) => [c.key, c.value && dec(c.value)]), [
        [`${base}.x`, "1"],
        [`${base}.y`, "2"],
        [`${base}.x`, null],
      ]);
    });

    it("watch on an empty filter is ready at once", async () => {
      const kv = getKv();
      let ready = false;
      const w = await kv.watch(`${k("empty")}.>`, () => assert.fail("no entries expected"), () => {
        ready = true;
      });
      await new Promise<void>((r) => setImmediate(r));
      w.stop();
      assert.equal(ready, true);
    });
  });
}

conformance("memory", () => new MemoryKv());
{
  // The simulation's fault-injecting view, faults off, over its shared MemoryKv.
  const view = new KvView({ clock: systemClock, random: seededRandom(1) });
  const kv = new FaultyKv(new MemoryKv("faulty"), view);
  conformance("FaultyKv (faults off)", () => kv);
}

for (const shape of ["single server", "3-server cluster, R3"] as const) {
  let fx: NatsFixture;
  let nc: NatsConnection;
  let kv: KvStore;
  describe(`nats: ${shape}`, () => {
    before(async () => {
      fx = shape === "single server" ? await startNats() : await startNatsCluster(3);
      nc = await fx.connect("conformance");
      const buckets = await openBuckets(nc, { clusterName: "conf", replicas: shape === "single server" ? 1 : 3 });
      kv = buckets.actors;
    });
    after(async () => {
      await nc?.close();
      await fx?.stop();
    });
    conformance(`nats (${shape})`, () => kv);
  });
}
