/**
 * What a scheduler believes of a worker's advert: the clamp to the operator's per-worker limits,
 * and the bench / trial / trust standing of a worker that leaves offers unanswered (the pure
 * decisions of src/slots/worker-trust.ts), then the same through the worker directory on a fake
 * clock.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { FakeClock } from "../../../src/lib/clock.ts";
import { seededRandom } from "../../../src/lib/random.ts";
import { makeNodeConfig } from "../../../src/cluster/config.ts";
import { WorkerDirectory, type DirectoryOptions } from "../../../src/slots/worker-directory.ts";
import {
  BACKOFF_BASE_MS,
  BACKOFF_MAX_MS,
  DEFAULT_ADVERT_LIMITS,
  FORGIVE_ANSWERS,
  FORGIVE_MS,
  TRIAL_STALE_MS,
  TRUSTED,
  advertLimits,
  afterOffer,
  afterPick,
  backoffMs,
  believedFree,
  clampAdvert,
  standingAt,
  type Standing,
} from "../../../src/slots/worker-trust.ts";
import type { WorkerAdvert } from "../../../src/protocol/worker.ts";

const limits = { maxSlots: 16, maxPrefetch: 4 };
const advert = (worker_id: string, free: number, slots = 4, prefetch?: number): WorkerAdvert => ({
  worker_id,
  slots,
  free,
  executor: "docker",
  ...(prefetch !== undefined ? { prefetch } : {}),
});

describe("worker trust: the clamp", () => {
  it("believes an advert within the limits as sent", () => {
    const a = advert("w", 6, 16, 4);
    const r = clampAdvert(a, limits);
    assert.equal(r.advert, a);
    assert.deepEqual(r.clamped, []);
  });

  it("cuts slots and prefetch to the limits and free to their sum", () => {
    const r = clampAdvert(advert("w", 1e9, 1e9, 1e9), limits);
    assert.deepEqual(r.advert, advert("w", 20, 16, 4));
    assert.deepEqual(r.clamped, ["slots", "prefetch", "free"]);
  });

  it("a free above the advert's own slots and prefetch is cut even within the limits", () => {
    const r = clampAdvert(advert("w", 9, 4, 2), limits);
    assert.equal(r.advert.free, 6);
    assert.deepEqual(r.clamped, ["free"]);
    const old = clampAdvert(advert("w", 5, 4), limits); // no prefetch field: slots only
    assert.equal(old.advert.free, 4);
    assert.equal(old.advert.prefetch, undefined);
  });

  it("believes an advert's executing attempts by tenant only whole: ids, counts ≥ 1, at most one per believed slot", () => {
    const ok = { ...advert("w", 0, 4), executing: { t1: 3, "t-2": 1 } };
    assert.equal(clampAdvert(ok, limits).advert, ok);
    const bad: unknown[] = [
      { t1: 5 }, // more than its 4 slots
      { t1: 2, t2: 2, t3: 1 },
      { t1: 0 },
      { t1: 1.5 },
      { t1: -1 },
      { t1: "2" },
      { "no.dots": 1 },
      { ["x".repeat(65)]: 1 },
      [1, 2],
      null,
      "t1",
    ];
    for (const executing of bad) {
      const r = clampAdvert({ ...advert("w", 0, 4), executing } as unknown as WorkerAdvert, limits);
      assert.deepEqual(r.clamped, ["executing"], JSON.stringify(executing));
      assert.equal(r.advert.executing, undefined, JSON.stringify(executing));
      assert.equal(r.advert.slots, 4);
    }
    // Cut to the believed slots: counted against those.
    const big = clampAdvert({ ...advert("w", 0, 100), executing: { t1: 20 } }, limits);
    assert.deepEqual(big.clamped, ["slots", "executing"]);
    assert.equal(big.advert.executing, undefined);
  });

  it("the node config's limits: defaults 1,024 and 256, validated", () => {
    const base = { natsUrl: "nats://127.0.0.1:4222", nodeId: "n1" };
    assert.deepEqual(advertLimits(makeNodeConfig(base)), DEFAULT_ADVERT_LIMITS);
    assert.deepEqual(DEFAULT_ADVERT_LIMITS, { maxSlots: 1_024, maxPrefetch: 256 });
    assert.deepEqual(advertLimits(makeNodeConfig({ ...base, maxWorkerSlots: 200_000 })), {
      maxSlots: 200_000,
      maxPrefetch: 256,
    });
    for (const bad of [0, -1, 1.5, 1_000_001, Number.NaN])
      assert.throws(
        () => makeNodeConfig({ ...base, maxWorkerSlots: bad }),
        (e: Error & { code?: string; field?: string }) =>
          e.code === "invalid_argument" && e.field === "max_worker_slots",
        String(bad),
      );
    assert.throws(
      () => makeNodeConfig({ ...base, maxWorkerPrefetch: -1 }),
      (e: Error & { field?: string }) => e.field === "max_worker_prefetch",
    );
    assert.equal(makeNodeConfig({ ...base, maxWorkerPrefetch: 0 }).maxWorkerPrefetch, 0);
  });
});

describe("worker trust: the standing", () => {
  it("the bench doubles per strike from BACKOFF_BASE_MS, capped at BACKOFF_MAX_MS", () => {
    assert.equal(backoffMs(1), BACKOFF_BASE_MS);
    assert.equal(backoffMs(2), 2 * BACKOFF_BASE_MS);
    assert.equal(backoffMs(3), 4 * BACKOFF_BASE_MS);
    assert.equal(backoffMs(50), BACKOFF_MAX_MS);
    assert.equal(backoffMs(1_000_000), BACKOFF_MAX_MS);
  });

  it("an unanswered offer benches a trusted worker: believed to have no room", () => {
    const s = afterOffer(TRUSTED, "unanswered", 1_000);
    assert.deepEqual(s, { kind: "benched", strikes: 1, until_ms: 1_000 + BACKOFF_BASE_MS });
    assert.equal(believedFree(s, 1_000), 0);
    assert.equal(afterOffer(TRUSTED, "answered", 1_000), TRUSTED, "an answer changes nothing");
  });

  it("more silence while benched adds no strike; an answer to an older offer does not restore it", () => {
    const s = afterOffer(TRUSTED, "unanswered", 0);
    assert.equal(afterOffer(s, "unanswered", 10), s, "the rest of the same flood timing out");
    assert.equal(afterOffer(s, "answered", 10), s);
  });

  it("after the bench: on trial, one offer at a time; answered → trusted; silent → benched twice as long", () => {
    const benched = afterOffer(TRUSTED, "unanswered", 0);
    const trial = standingAt(benched, BACKOFF_BASE_MS);
    assert.deepEqual(trial, { kind: "on_trial", strikes: 1, trial_ms: null });
    assert.equal(believedFree(trial, 500), 1, "room for one offer");
    assert.equal(believedFree(trial, 0), 0, "not more than it advertises");
    const out = afterPick(trial, BACKOFF_BASE_MS);
    assert.equal(believedFree(out, 500), 0, "the trial offer is out: no second one");
    assert.deepEqual(afterOffer(out, "answered", 6_000), {
      kind: "trusted",
      strikes: 1,
      since_ms: 6_000,
      answered: 0,
    });
    assert.deepEqual(afterOffer(out, "unanswered", 7_000), {
      kind: "benched",
      strikes: 2,
      until_ms: 7_000 + 2 * BACKOFF_BASE_MS,
    });
  });

  it("a trial whose outcome never came back is given up after TRIAL_STALE_MS", () => {
    const out: Standing = { kind: "on_trial", strikes: 1, trial_ms: 100 };
    assert.equal(standingAt(out, 100 + TRIAL_STALE_MS - 1), out);
    assert.deepEqual(standingAt(out, 100 + TRIAL_STALE_MS), { ...out, trial_ms: null });
  });

  it("strikes are kept while trusted until FORGIVE_ANSWERS answers or FORGIVE_MS: a worker that answers its trial, then sits on the next flood, is benched longer", () => {
    const recovered: Standing = { kind: "trusted", strikes: 3, since_ms: 0, answered: 0 };
    assert.equal(believedFree(recovered, 7), 7, "trusted: believed as advertised");
    const again = afterOffer(recovered, "unanswered", 1_000);
    assert.deepEqual(again, { kind: "benched", strikes: 4, until_ms: 1_000 + backoffMs(4) });
    assert.equal(standingAt(recovered, FORGIVE_MS), TRUSTED, "forgiven");
    let s: Standing = recovered;
    for (let i = 1; i < FORGIVE_ANSWERS; i++) s = afterOffer(s, "answered", i);
    assert.deepEqual(s, { ...recovered, answered: FORGIVE_ANSWERS - 1 });
    assert.equal(afterOffer(s, "answered", 99), TRUSTED, "an honest worker's answers forgive it");
    assert.deepEqual(afterOffer(recovered, "unanswered", FORGIVE_MS), {
      kind: "benched",
      strikes: 1,
      until_ms: FORGIVE_MS + BACKOFF_BASE_MS,
    });
  });
});

describe("worker trust: in the worker directory", () => {
  const dir = (clock: FakeClock, extra: DirectoryOptions = {}) =>
    new WorkerDirectory(clock, seededRandom(11), 60_000, { optimistic: true, limits, ...extra });

  it("an inflated advert is believed only up to the limits: picks, room and capacity; told once per run of such adverts", () => {
    const clock = new FakeClock(0);
    const told: string[] = [];
    const d = dir(clock, { onClamped: (w, fields) => told.push(`${w}:${fields.join(",")}`) });
    const woken: string[] = [];
    for (let i = 0; i < 30; i++) d.waitForRoom(`r${i}`, () => woken.push(`r${i}`));
    d.observe(advert("liar", 1e9, 1e9, 1e9));
    assert.equal(
      woken.length,
      20,
      "an advert wakes as many waiting dispatches as its believed room",
    );
    assert.equal(d.capacity(), 24, "16 slots and 4 places in each of its two prefetch queues");
    d.observe(advert("liar", 1e9, 1e9, 1e9));
    d.observe(advert("honest", 4, 4, 2));
    assert.deepEqual(told, ["liar:slots,prefetch,free"]);
    const picks = Array.from({ length: 40 }, () => d.pick());
    const count = (w: string | undefined) => picks.filter((p) => p === w).length;
    assert.equal(
      count("liar"),
      20,
      "its believed room (16 slots + 4 prefetch), no hope past its slots",
    );
    assert.equal(count("honest"), 4);
    assert.equal(count(undefined), 16);
    d.observe(advert("liar", 2, 4));
    d.observe(advert("liar", 1e9, 1e9));
    assert.equal(told.length, 2, "within the limits once, then above them again: told again");
  });

  it("a worker that leaves an offer unanswered draws no run until its bench ends, then one trial; answered, it is trusted again", () => {
    const clock = new FakeClock(0);
    const standings: string[] = [];
    const d = dir(clock, { onStanding: (w, s) => standings.push(`${w}:${s.kind}:${s.strikes}`) });
    d.observe(advert("liar", 20, 16, 4));
    d.observe(advert("honest", 4, 8));
    assert.equal(d.pick(), "liar", "the most free slots");
    d.markUnanswered("liar");
    assert.deepEqual(standings, ["liar:benched:1"]);
    assert.equal(d.capacity(), 8, "a benched worker's places are not shared");
    d.observe(advert("liar", 20, 16, 4)); // it goes on advertising
    assert.equal(d.hasRoom(), true, "the honest worker's room");
    const during = Array.from({ length: 4 }, () => d.pick());
    assert.deepEqual(during, ["honest", "honest", "honest", "honest"]);
    assert.equal(d.pick(), "honest", "optimistic: the honest worker that has not refused");
    clock.advance(BACKOFF_BASE_MS);
    d.observe(advert("liar", 20, 16, 4));
    d.observe(advert("honest", 0, 8));
    d.markFull("honest");
    assert.equal(d.pick(), "liar", "on trial: one offer");
    d.observe(advert("liar", 20, 16, 4)); // a new advert does not open a second trial
    assert.equal(d.pick(), undefined);
    d.markAnswered("liar");
    assert.deepEqual(standings, ["liar:benched:1", "liar:trusted:1"]);
    assert.equal(d.capacity(), 32, "16 slots + 2 × 4 prefetch, and the honest worker's 8");
    d.observe(advert("liar", 20, 16, 4));
    assert.equal(d.pick(), "liar", "trusted: believed again (up to the limits)");
  });

  it("silence on trial benches it twice as long; a benched worker that stops advertising is still benched when it comes back", () => {
    const clock = new FakeClock(0);
    const d = new WorkerDirectory(clock, seededRandom(12), 3_000, { limits });
    d.observe(advert("w", 4));
    d.markUnanswered("w");
    clock.advance(BACKOFF_BASE_MS);
    d.observe(advert("w", 4));
    assert.equal(d.pick(), "w", "the trial");
    d.markUnanswered("w");
    assert.deepEqual(d.standing("w"), {
      kind: "benched",
      strikes: 2,
      until_ms: 2 * BACKOFF_BASE_MS + BACKOFF_BASE_MS,
    });
    clock.advance(4_000); // forgotten: silent longer than the expiry
    assert.equal(d.size, 1);
    assert.equal(d.pick(), undefined);
    assert.equal(d.size, 0);
    d.observe(advert("w", 4));
    assert.equal(d.pick(), undefined, "back, but still benched");
    clock.advance(2 * BACKOFF_BASE_MS);
    d.observe(advert("w", 4));
    assert.equal(d.pick(), "w");
  });

  it("an advert of a benched worker wakes no waiting dispatch", () => {
    const clock = new FakeClock(0);
    const d = dir(clock);
    d.observe(advert("liar", 4));
    d.markUnanswered("liar");
    const woken: string[] = [];
    d.waitForRoom("r", () => woken.push("r"));
    d.observe(advert("liar", 4));
    assert.deepEqual(woken, []);
    assert.equal(d.hasRoom(), false);
    d.observe(advert("honest", 1));
    assert.deepEqual(woken, ["r"]);
  });
});
