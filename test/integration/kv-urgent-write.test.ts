/**
 * NatsKv's `update(…, { urgent: true })` (src/cluster/kv-nats.ts) takes the urgent lane of the
 * shared in-flight limiter: with the limiter full, an urgent write waiting behind non-urgent
 * ones reaches the real nats-server first (its revision is the lowest of them). The actor host
 * passes it for an urgent turn's writes — a worker's claim admitted first still waited here
 * behind the admitted turns' writes.
 */
import { describe, it, after } from "node:test";
import assert from "node:assert/strict";
import { Kvm } from "@nats-io/kv";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { NatsKv } from "../../src/cluster/kv-nats.ts";
import { InFlightLimiter } from "../../src/cluster/in-flight.ts";
import { startNats, type NatsFixture } from "../support/nats.ts";

describe("kv urgent write", () => {
  let nats: NatsFixture | undefined;
  let nc: NatsConnection | undefined;
  after(async () => {
    await nc?.close();
    await nats?.stop();
  });

  it(
    "an urgent update waiting for the limiter is written before the non-urgent writes queued ahead of it",
    { timeout: 60_000 },
    async () => {
      nats = await startNats();
      nc = await nats.connect("urgent-write");
      const limiter = new InFlightLimiter(1);
      const kv = new NatsKv(
        "kairos_urgent",
        await new Kvm(nc).create("kairos_urgent", { history: 1 }),
        await jetstreamManager(nc),
        5_000,
        limiter,
      );
      const keys = ["a", "b", "c", "u"];
      const revs = new Map<string, number>();
      for (const k of keys) {
        const r = await kv.create(k, new Uint8Array([0]));
        assert.ok(r.ok);
        revs.set(k, r.revision);
      }
      // Hold the limiter's one place, queue three plain updates, then one urgent.
      let release!: () => void;
      const holder = limiter.run(() => new Promise<void>((r) => (release = r)));
      const writes = keys.map((k) =>
        kv.update(k, new Uint8Array([1]), revs.get(k)!, { urgent: k === "u" }),
      );
      assert.equal(limiter.waiting, 4);
      release();
      await holder;
      const results = await Promise.all(writes);
      const written = results.map((r, i) => {
        assert.ok(r.ok, `update of ${keys[i]} failed`);
        return { key: keys[i]!, revision: r.revision };
      });
      const order = [...written].sort((x, y) => x.revision - y.revision).map((w) => w.key);
      assert.deepEqual(order, ["u", "a", "b", "c"]);
    },
  );
});
