/**
 * Dead-letter retention (src/notify/dead-letter-retention.ts): a tenant keeps its newest
 * `keepPerTenant` dead letters and none older than the age limit, dropped as a prefix in write
 * order by one purge per tenant; other tenants and other keys of the runs bucket are untouched;
 * an old entry written after a kept one is not dropped before it; a second pass drops nothing.
 * The stream purge itself is conformance-tested on a real server (kv-conformance).
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { encode } from "../../../src/cluster/codec.ts";
import { runIdFor } from "../../../src/protocol/ids.ts";
import { deadLetterKey } from "../../../src/notify/dead-letters.ts";
import {
  deadLetterCuts,
  deadLetterRetention,
  pruneDeadLetters,
} from "../../../src/notify/dead-letter-retention.ts";

const JOB = "j0123456789abcdef";
const DAY = 86_400_000;
const NOW = Date.parse("2026-12-03T00:00:00Z");

async function write(kv: MemoryKv, tenant: string, atMs: number[]): Promise<string[]> {
  const ids: string[] = [];
  for (const ms of atMs) {
    const id = runIdFor(JOB, ms);
    await kv.create(deadLetterKey(tenant, id), encode({ run_id: id }));
    ids.push(id);
  }
  return ids;
}
const left = async (kv: MemoryKv, tenant: string) =>
  (await kv.list(`dl.${tenant}.>`)).map((e) => e.key.split(".")[2]).sort();

describe("dead-letter retention", () => {
  it("keeps the newest keepPerTenant per tenant, in one purge each; other tenants and keys untouched", async () => {
    const kv = new MemoryKv("runs");
    const a = await write(kv, "ta", [1, 2, 3, 4, 5].map((i) => NOW - i * 1000).reverse());
    const b = await write(kv, "tb", [NOW - 1000, NOW - 2000]);
    await kv.create("0.ta.j.run", encode({}));
    await kv.create(`ob.0.ta.${a[0]}`, encode({}));
    const dropped = await pruneDeadLetters(
      kv,
      deadLetterRetention({ keepPerTenant: 3, maxAgeMs: 0 }),
      NOW,
    );
    assert.equal(dropped, 2);
    assert.deepEqual(await left(kv, "ta"), a.slice(2).sort());
    assert.deepEqual(await left(kv, "tb"), b.sort());
    assert.ok(await kv.get("0.ta.j.run"), "run records are not dead letters");
    assert.ok(await kv.get(`ob.0.ta.${a[0]}`), "outbox entries are not dead letters");
    assert.equal(
      await pruneDeadLetters(kv, deadLetterRetention({ keepPerTenant: 3, maxAgeMs: 0 }), NOW),
      0,
      "a second pass drops nothing",
    );
  });

  it("drops dead letters older than the age limit, all of a tenant's when all are old", async () => {
    const kv = new MemoryKv("runs");
    const a = await write(kv, "ta", [NOW - 40 * DAY, NOW - 31 * DAY, NOW - 29 * DAY, NOW - DAY]);
    await write(kv, "tb", [NOW - 50 * DAY, NOW - 45 * DAY]);
    const dropped = await pruneDeadLetters(kv, deadLetterRetention({ maxAgeMs: 30 * DAY }), NOW);
    assert.equal(dropped, 4);
    assert.deepEqual(await left(kv, "ta"), a.slice(2).sort());
    assert.deepEqual(await left(kv, "tb"), []);
  });

  it("an old entry written after a kept one waits (prefix in write order); unparseable keys stop the prefix", () => {
    const rev = (key: string, revision: number) => ({ key, revision });
    const old = runIdFor(JOB, NOW - 60 * DAY);
    const fresh = runIdFor(JOB, NOW - DAY);
    const cuts = deadLetterCuts(
      [
        rev(`dl.ta.${old}`, 1),
        rev(`dl.ta.${fresh}`, 2),
        rev(`dl.ta.${runIdFor(JOB, NOW - 70 * DAY)}`, 3),
        rev("dl.tb.not-a-run-id", 4),
        rev(`dl.tb.${old}`, 5),
      ],
      deadLetterRetention(),
      NOW,
    );
    assert.deepEqual([...cuts], [["ta", { beforeRevision: 2, dropped: 1 }]]);
  });

  it("0 and 0 turn it off; bounds are validated with the field named", async () => {
    const kv = new MemoryKv("runs");
    await write(kv, "ta", [NOW - 400 * DAY]);
    assert.equal(
      await pruneDeadLetters(kv, deadLetterRetention({ keepPerTenant: 0, maxAgeMs: 0 }), NOW),
      0,
    );
    assert.throws(() => deadLetterRetention({ keepPerTenant: -1 }), /keepPerTenant/);
    assert.throws(() => deadLetterRetention({ maxAgeMs: 1.5 }), /maxAgeMs/);
  });
});

describe("dead-letter retention in the outbox", () => {
  it("a started outbox runs a pass a minute after start, then daily; stop ends them", async () => {
    const { DeadLetterOutbox } = await import("../../../src/notify/dead-letters.ts");
    const { FakeClock } = await import("../../../src/lib/clock.ts");
    const kv = new MemoryKv("runs");
    const clock = new FakeClock(NOW);
    const logs: string[] = [];
    const outbox = new DeadLetterOutbox({
      runs: () => kv,
      held: () => [],
      clock,
      log: (_l, m) => logs.push(m),
      webhook: async () => undefined,
      retention: deadLetterRetention({ keepPerTenant: 1, maxAgeMs: 0 }),
    });
    await write(kv, "ta", [NOW - 3000, NOW - 2000, NOW - 1000]);
    outbox.start();
    const passed = async () => {
      for (let i = 0; i < 50 && !logs.includes("dead letters pruned"); i++)
        await new Promise((r) => setImmediate(r));
    };
    clock.advance(59_000);
    await passed();
    assert.equal((await left(kv, "ta")).length, 3, "no pass before a minute");
    clock.advance(1_000);
    await passed();
    assert.equal((await left(kv, "ta")).length, 1, "the first pass a minute after start");
    logs.length = 0;
    await write(kv, "ta", [NOW - 500]);
    clock.advance(86_400_000);
    await passed();
    assert.equal((await left(kv, "ta")).length, 1, "and daily");
    outbox.stop();
    await write(kv, "ta", [NOW - 400]);
    clock.advance(2 * 86_400_000);
    for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
    assert.equal((await left(kv, "ta")).length, 2, "stopped: no more passes");
  });
});
