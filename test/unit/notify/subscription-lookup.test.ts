/**
 * The schedulers' subscription lookup (src/notify/subscriptions.ts) on the in-memory KV: before
 * its watch starts it reads per tenant through its cache; once started it answers from memory —
 * no KV operation per lookup — and follows creates and deletes as they are written.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { KvSubscriptions, SubscriptionLookup } from "../../../src/notify/subscriptions.ts";
import type { SubscriptionInput } from "../../../src/protocol/events.ts";

const input: SubscriptionInput = {
  events: ["run.failed"],
  job_id: null,
  channel: { kind: "email", to: "ops@example.com" },
};

/** A MemoryKv that counts reads. */
class CountingKv extends MemoryKv {
  reads = 0;
  override list(filter: string) {
    this.reads++;
    return super.list(filter);
  }
  override get(key: string) {
    this.reads++;
    return super.get(key);
  }
}

describe("SubscriptionLookup", () => {
  it("reads per tenant through its cache before the watch, then answers from memory and follows changes", async () => {
    const kv = new CountingKv("tenants");
    const clock = new FakeClock(0);
    const api = new KvSubscriptions(kv, clock);
    const a1 = await api.create("ta", input);
    await api.create("tb", input);
    const lookup = new SubscriptionLookup(() => kv, clock);
    assert.equal(lookup.cached("ta"), undefined, "nothing known yet");
    assert.deepEqual(
      (await lookup.of("ta")).map((s) => s.subscription_id),
      [a1.subscription_id],
    );
    await lookup.of("ta");
    const readsBefore = kv.reads;
    await lookup.start();
    kv.reads = 0;
    for (let i = 0; i < 1000; i++) await lookup.of(i % 2 ? "ta" : "nobody");
    assert.equal(kv.reads, 0, "no KV operation per lookup once watched");
    assert.ok(readsBefore >= 1);
    const a2 = await api.create("ta", input);
    assert.deepEqual(
      lookup.cached("ta")?.map((s) => s.subscription_id),
      [a1.subscription_id, a2.subscription_id],
      "a create is seen, oldest first",
    );
    await api.delete("ta", a1.subscription_id);
    assert.deepEqual(
      lookup.cached("ta")?.map((s) => s.subscription_id),
      [a2.subscription_id],
    );
    await api.delete("ta", a2.subscription_id);
    assert.deepEqual(lookup.cached("ta"), [], "a tenant with none: known, empty");
    assert.equal((await lookup.of("tb")).length, 1);
    lookup.stop();
  });
});
