/**
 * The lease keepers' conformance suite: the same cases against the inline keeper (on MemoryKv
 * and on NatsKv) and the thread keeper (its worker thread on its own connection to a real
 * nats-server). Then what only the thread keeper promises: a main event loop blocked for longer
 * than a trust window keeps its leases; a main loop silent past `mainStallMs` stops renewals; a
 * thread that cannot connect falls back to renewing inline.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { bucketName, openBuckets } from "../../src/cluster/buckets.ts";
import type { KvStore } from "../../src/cluster/kv.ts";
import { MemoryKv } from "../../src/cluster/kv-memory.ts";
import { trustedUntil } from "../../src/cluster/lease-decision.ts";
import {
  InlineLeaseKeeper,
  leaseKey,
  leaseValue,
  type LeaseKeeper,
  type LeaseKeeperOptions,
} from "../../src/cluster/lease-keeper.ts";
import { ThreadLeaseKeeper } from "../../src/cluster/lease-keeper-thread.ts";
import { systemClock } from "../../src/lib/clock.ts";
import { startNats, type NatsFixture } from "../support/nats.ts";

const CLUSTER = "kairos";
const OPTS: LeaseKeeperOptions = {
  me: "n1",
  incarnation: "i1",
  leaseTtlMs: 1000,
  renewIntervalMs: 150,
  safetyMarginMs: 250,
};
const TICK_MS = 25;

/** Waits (polling memory, 5 ms) until `cond` holds; fails after `ms`. */
async function until(cond: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > deadline)
      throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Blocks this thread's event loop (no timers, no I/O) for `ms`. */
function blockFor(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    /* busy */
  }
}

interface Subject {
  keeper: LeaseKeeper;
  kv: KvStore;
  stop(): Promise<void>;
}

/** Acquires partition `p` the way the partition manager does, and hands it to the keeper. */
async function acquire(s: Subject, p: number): Promise<number> {
  const started = systemClock.monoMs();
  const r = await s.kv.create(leaseKey(p), leaseValue(OPTS, 0, systemClock.now()));
  assert.ok(r.ok, "lease created");
  s.keeper.hold(p, {
    epoch: r.revision,
    revision: r.revision,
    lastRenewMs: started,
    trustedUntilMs: trustedUntil(started, OPTS.leaseTtlMs, OPTS.safetyMarginMs),
  });
  return r.revision;
}

/** The partition manager's tick, driven by a timer on this thread. */
function ticking(keeper: LeaseKeeper): () => void {
  const t = setInterval(() => keeper.tick(systemClock.monoMs()), TICK_MS);
  return () => clearInterval(t);
}

function conformance(name: string, make: () => Promise<Subject>): void {
  describe(`LeaseKeeper conformance: ${name}`, () => {
    let s: Subject;
    let stopTicks: () => void;
    let next = 0;
    before(async () => {
      s = await make();
      stopTicks = ticking(s.keeper);
    });
    after(async () => {
      stopTicks();
      await s.stop();
    });

    it("renews a held lease: its revision grows and its trust window moves on", async () => {
      const p = next++;
      const rev0 = await acquire(s, p);
      const first = s.keeper.view(p)!;
      await until(() => (s.keeper.view(p)?.revision ?? 0) > rev0 + 2, 3000, "three renewals");
      const v = s.keeper.view(p)!;
      assert.equal(v.epoch, rev0, "a renewal keeps the epoch");
      assert.ok(v.trustedUntilMs > first.trustedUntilMs, "trust window extended");
      assert.equal(s.keeper.trustedUntilMs(p), v.trustedUntilMs);
      assert.ok(systemClock.monoMs() < s.keeper.trustedUntilMs(p));
      assert.equal((await s.kv.get(leaseKey(p)))!.revision >= v.revision, true);
      assert.equal(v.lost, undefined);
    });

    it("a lease written by someone else is lost at the next renewal (CAS conflict), trust ends at once", async () => {
      const p = next++;
      await acquire(s, p);
      const e = (await s.kv.get(leaseKey(p)))!;
      const stolen = await s.kv.update(
        leaseKey(p),
        leaseValue({ me: "n2", incarnation: "x" }, e.revision, systemClock.now()),
        e.revision,
      );
      assert.ok(stolen.ok);
      await until(() => s.keeper.view(p)?.lost !== undefined, 3000, "the conflict");
      assert.equal(s.keeper.view(p)!.lost, "lease renewal conflict");
      assert.equal(s.keeper.trustedUntilMs(p), 0);
      s.keeper.drop(p);
      assert.equal(s.keeper.view(p), undefined);
    });

    it("release waits out the renewal in flight and answers the latest revision; no renewal after", async () => {
      const p = next++;
      const rev0 = await acquire(s, p);
      await until(() => (s.keeper.view(p)?.revision ?? 0) > rev0, 3000, "a renewal");
      const last = await s.keeper.release(p);
      const stored = (await s.kv.get(leaseKey(p)))!.revision;
      assert.equal(last, stored, "release answers the revision in KV");
      assert.equal(s.keeper.view(p), undefined);
      assert.equal(s.keeper.trustedUntilMs(p), 0);
      await new Promise((r) => setTimeout(r, 4 * OPTS.renewIntervalMs));
      assert.equal((await s.kv.get(leaseKey(p)))!.revision, stored, "renewed after its release");
    });

    it("drop stops renewing at once", async () => {
      const p = next++;
      await acquire(s, p);
      s.keeper.drop(p);
      const stored = (await s.kv.get(leaseKey(p)))!.revision;
      await new Promise((r) => setTimeout(r, 4 * OPTS.renewIntervalMs));
      const now = (await s.kv.get(leaseKey(p)))!.revision;
      // A renewal already in flight at the drop may land once; none after it.
      assert.ok(now <= stored + 1, `renewed after drop: ${stored} → ${now}`);
    });

    it("a partition released and acquired again is renewed under its new epoch", async () => {
      const p = next++;
      await acquire(s, p);
      const last = await s.keeper.release(p);
      assert.ok(last !== undefined);
      assert.ok((await s.kv.delete(leaseKey(p), last)).ok);
      const rev1 = await acquire(s, p);
      await until(
        () => (s.keeper.view(p)?.revision ?? 0) > rev1,
        3000,
        "a renewal of the new hold",
      );
      assert.equal(s.keeper.view(p)!.epoch, rev1);
    });
  });
}

let nats: NatsFixture;
let nc: NatsConnection;
let leases: KvStore;
const natsUrl = () => nats.url;
const creds = () => nats.credsFor(["scheduler"]);

before(async () => {
  nats = await startNats();
  nc = await nats.connect("lease-keeper-test", ["scheduler"]);
  leases = (await openBuckets(nc, { clusterName: CLUSTER, replicas: 1 })).leases;
});
after(async () => {
  await nc?.close();
  await nats?.stop();
});

const threadKeeper = (
  o: Partial<{ url: string; mainStallMs: number; startTimeoutMs: number }> = {},
) =>
  ThreadLeaseKeeper.start({
    keeper: OPTS,
    partitions: 64,
    natsUrl: o.url ?? natsUrl(),
    natsAuth: { credsFile: creds() },
    connectionName: "lease-keeper-test-thread",
    bucket: bucketName(CLUSTER, "leases"),
    tickMs: TICK_MS,
    mainStallMs: o.mainStallMs ?? 5000,
    startTimeoutMs: o.startTimeoutMs ?? 10_000,
    clock: systemClock,
    leases,
    onError: () => undefined,
  });

conformance("inline on MemoryKv", async () => {
  const kv = new MemoryKv("leases");
  return {
    kv,
    keeper: new InlineLeaseKeeper(kv, systemClock, OPTS, () => undefined),
    stop: async () => undefined,
  };
});
conformance("inline on NatsKv", async () => {
  // A fresh key range: partitions 100+ would exceed nothing for the inline keeper, but share the bucket.
  await Promise.all(
    Array.from({ length: 8 }, (_, p) =>
      leases.get(leaseKey(p)).then((e) => e && leases.delete(leaseKey(p), e.revision)),
    ),
  );
  const keeper = new InlineLeaseKeeper(leases, systemClock, OPTS, () => undefined);
  return { kv: leases, keeper, stop: () => keeper.stop() };
});
conformance("thread on its own NATS connection", async () => {
  await Promise.all(
    Array.from({ length: 8 }, (_, p) =>
      leases.get(leaseKey(p)).then((e) => e && leases.delete(leaseKey(p), e.revision)),
    ),
  );
  const keeper = await threadKeeper();
  assert.equal(keeper.threaded, true, "the thread connected");
  return { kv: leases, keeper, stop: () => keeper.stop() };
});

describe("ThreadLeaseKeeper", () => {
  it("keeps renewing while the main event loop is blocked for longer than a trust window", async () => {
    const keeper = await threadKeeper();
    const stopTicks = ticking(keeper);
    try {
      const p = 20;
      const rev0 = await acquire({ keeper, kv: leases, stop: async () => undefined }, p);
      const window = OPTS.leaseTtlMs - OPTS.safetyMarginMs;
      blockFor(2 * window); // no tick, no I/O on this thread
      assert.ok(
        systemClock.monoMs() < keeper.trustedUntilMs(p),
        "trust window lapsed while the main loop was blocked",
      );
      assert.ok(keeper.view(p)!.revision > rev0 + 2, "renewed by the thread meanwhile");
      // The inline keeper on the same blocked loop would have lapsed: nothing renewed it.
      await keeper.release(p);
    } finally {
      stopTicks();
      await keeper.stop();
    }
  });

  it("stops renewing when the main loop shows no life for mainStallMs, says so, and never renews the lapsed lease", async () => {
    const keeper = await threadKeeper({ mainStallMs: 1000 });
    try {
      const p = 21;
      await acquire({ keeper, kv: leases, stop: async () => undefined }, p);
      keeper.tick(systemClock.monoMs());
      // No ticks from here: the thread must pause, and the trust window run out.
      await until(() => keeper.view(p)?.stalledMs !== undefined, 5000, "renewals paused");
      await until(
        () => systemClock.monoMs() >= keeper.trustedUntilMs(p),
        5000,
        "the trust window to end",
      );
      const rev = keeper.view(p)!.revision;
      await new Promise((r) => setTimeout(r, 4 * OPTS.renewIntervalMs));
      assert.equal(keeper.view(p)!.revision, rev, "renewed while paused");
      // Life again: the pause ends, but a lease whose trust window is over is not renewed (the
      // partition manager gives it up at its tick; renewing it would only keep it in KV longer).
      const stopTicks = ticking(keeper);
      try {
        await until(() => keeper.view(p)?.stalledMs === undefined, 3000, "the pause to end");
        await new Promise((r) => setTimeout(r, 4 * OPTS.renewIntervalMs));
        assert.equal(keeper.view(p)!.revision, rev, "a lapsed lease renewed");
      } finally {
        stopTicks();
      }
    } finally {
      await keeper.stop();
    }
  });

  it("falls back to renewing inline when its thread cannot connect", async () => {
    const errors: string[] = [];
    const keeper = await ThreadLeaseKeeper.start({
      keeper: OPTS,
      partitions: 64,
      natsUrl: "nats://127.0.0.1:1",
      natsAuth: {},
      connectionName: "lease-keeper-test-bad",
      bucket: bucketName(CLUSTER, "leases"),
      tickMs: TICK_MS,
      mainStallMs: 5000,
      startTimeoutMs: 10_000,
      clock: systemClock,
      leases,
      onError: (m) => errors.push(m),
    });
    const stopTicks = ticking(keeper);
    try {
      assert.equal(keeper.threaded, false);
      assert.ok(
        errors.some((m) => /fall back/.test(m)),
        errors.join("; "),
      );
      const p = 22;
      const rev0 = await acquire({ keeper, kv: leases, stop: async () => undefined }, p);
      await until(() => (keeper.view(p)?.revision ?? 0) > rev0 + 1, 3000, "inline renewals");
      await keeper.release(p);
    } finally {
      stopTicks();
      await keeper.stop();
    }
  });
});
