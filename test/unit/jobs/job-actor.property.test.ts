/**
 * Seeded property test of the job actor: random interleavings of fire, heartbeats, completions,
 * lease expiries, retry and redispatch timers, late claims and slot grants, run-now, patches and
 * clock moves (with and without timers firing), with current or stale fences. After every step
 * the invariants of docs/design.md hold (see `check`). The state handed to the core is deep-frozen, so
 * a mutation of its input throws. fast-check prints the seed and the shrunk sequence on failure.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { runIdFor } from "../../../src/protocol/ids.ts";
import type { Completion, JobMsg } from "../../../src/job-state/job-types.ts";
import { TERMINAL, type JobSpec, type Overlap } from "../../../src/protocol/model.ts";
import { Driver, JOB, cfg, spec } from "./driver.ts";

type Op =
  | { t: "advance"; ms: number }
  | { t: "downtime"; ms: number }
  | { t: "fire" }
  | { t: "heartbeat"; pick: number; stale: number; started: boolean }
  | { t: "complete"; pick: number; stale: number; outcome: number }
  | { t: "lease_expired"; pick: number; stale: number }
  | { t: "retry_due"; pick: number }
  | { t: "redispatch"; pick: number }
  | { t: "claim"; pick: number }
  | { t: "grant"; pick: number }
  | { t: "run_now" }
  | { t: "patch"; change: number }
  | { t: "delete" };

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      t: fc.constant("advance" as const),
      ms: fc.integer({ min: 0, max: 6_000 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant("downtime" as const),
      ms: fc.integer({ min: 0, max: 120_000 }),
    }),
  },
  { weight: 2, arbitrary: fc.constant({ t: "fire" as const }) },
  {
    weight: 4,
    arbitrary: fc.record({
      t: fc.constant("heartbeat" as const),
      pick: fc.nat(),
      stale: fc.integer({ min: 0, max: 3 }),
      started: fc.boolean(),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      t: fc.constant("complete" as const),
      pick: fc.nat(),
      stale: fc.integer({ min: 0, max: 3 }),
      outcome: fc.integer({ min: 0, max: 4 }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      t: fc.constant("lease_expired" as const),
      pick: fc.nat(),
      stale: fc.integer({ min: 0, max: 2 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("retry_due" as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("redispatch" as const), pick: fc.nat() }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant("claim" as const), pick: fc.nat() }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant("grant" as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.constant({ t: "run_now" as const }) },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant("patch" as const),
      change: fc.integer({ min: 0, max: 5 }),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ t: "delete" as const }) },
);

const scenario = fc.record({
  overlap: fc.constantFrom<Overlap>("skip", "queue", "allow", "replace"),
  policy: fc.constantFrom<JobSpec["misfire"]["policy"]>("run_once", "run_all", "skip"),
  deadline: fc.option(fc.integer({ min: 1, max: 60 }), { nil: null }),
  maxAttempts: fc.integer({ min: 1, max: 3 }),
  autoGrant: fc.boolean(),
  autoClaim: fc.boolean(),
  flex: fc.constantFrom(0, 3),
  ops: fc.array(op, { maxLength: 60 }),
});

const COMPLETIONS: Partial<Completion>[] = [
  { exit_code: 0 },
  { exit_code: 3 },
  { outcome: "timed_out", exit_code: null },
  {
    outcome: "error",
    exit_code: null,
    error: { class: "invalid_task", message: "bad", retryable: false },
  },
  { outcome: "oom", exit_code: 137 },
];

function pickOf<T>(xs: readonly T[], i: number): T | undefined {
  return xs.length === 0 ? undefined : xs[i % xs.length];
}

/** A run id: mostly an active one, sometimes one that has ended or never existed. */
function runOf(d: Driver, pick: number): string {
  const active = d.state.runs.map((r) => r.run_id);
  if (pick % 5 !== 4 && active.length > 0) return pickOf(active, pick)!;
  return pickOf([...d.records.keys(), "j0123456789abcdef-zz"], pick)!;
}

/** The current fence of a run (stale = 0), or an older/foreign one. */
function fenceOf(d: Driver, runId: string, stale: number): number {
  const current = d.run(runId)?.fence ?? 0;
  if (stale === 0) return current;
  const older = d.dispatches
    .filter((x) => x.run_id === runId && x.fence !== current)
    .map((x) => x.fence);
  return pickOf(older, stale) ?? current + stale;
}

function step(d: Driver, o: Op): void {
  switch (o.t) {
    case "advance":
      return d.advance(o.ms);
    case "downtime":
      return d.skipTime(o.ms);
    case "fire":
      d.send({ kind: "fire" });
      return;
    case "heartbeat": {
      const id = runOf(d, o.pick);
      d.heartbeat(id, fenceOf(d, id, o.stale), o.started ? d.now : undefined);
      return;
    }
    case "complete": {
      const id = runOf(d, o.pick);
      d.complete(id, COMPLETIONS[o.outcome], fenceOf(d, id, o.stale));
      return;
    }
    case "lease_expired": {
      const id = runOf(d, o.pick);
      d.send({ kind: "lease_expired", run_id: id, fence: fenceOf(d, id, o.stale) });
      return;
    }
    case "retry_due":
    case "redispatch":
      d.send({ kind: o.t, run_id: runOf(d, o.pick) });
      return;
    case "claim": {
      const fx = d.pendingClaims.splice(o.pick % Math.max(1, d.pendingClaims.length), 1)[0];
      if (fx)
        d.send({ kind: "claimed", run_id: fx.run_id, fence: fx.fence, worker: `w${o.pick % 3}` });
      return;
    }
    case "grant": {
      const id = pickOf(d.pendingSlots, o.pick);
      if (id !== undefined) d.grant(id);
      return;
    }
    case "run_now":
      d.send({ kind: "run_now" });
      return;
    case "patch": {
      const patches: JobMsg[] = [
        { kind: "patch", patch: { enabled: false } },
        { kind: "patch", patch: { enabled: true } },
        { kind: "patch", patch: { schedule: { cron: "*/3 * * * * *", time_zone: "UTC" } } },
        { kind: "patch", patch: { schedule: { cron: "*/2 * * * * *", time_zone: "UTC" } } },
        { kind: "patch", patch: { overlap: "allow" } },
        { kind: "patch", patch: { name: "x" }, if_match: 1 },
      ];
      d.send(patches[o.change]!);
      return;
    }
    case "delete":
      d.send({ kind: "delete" });
      return;
  }
}

function check(d: Driver, prevFenceSeq: number): void {
  const s = d.state;
  assert.deepEqual(d.violations, [], "record writes");
  assert.equal(d.dupCreates, 0, "a run record was created twice");
  assert.ok(s.fence_seq >= prevFenceSeq, "fence_seq never decreases");
  const ids = s.runs.map((r) => r.run_id);
  assert.equal(new Set(ids).size, ids.length, "one active run per run id");
  const fences = s.runs.map((r) => r.fence).filter((f) => f > 0);
  assert.equal(
    new Set(fences).size,
    fences.length,
    `active fences are unique: ${fences.join(",")}`,
  );
  for (const r of s.runs) {
    assert.ok(r.fence <= s.fence_seq, "fence <= fence_seq");
    assert.ok(!TERMINAL.has(r.status), `run ${r.run_id} in state is ${r.status}`);
    const rec = d.records.get(r.run_id);
    assert.equal(rec?.status, r.status, `record of active run ${r.run_id}`);
    assert.equal(r.attempt, r.attempts.length);
    if (r.status === "leased" || r.status === "running")
      assert.ok(r.slot && r.worker !== null, "a claimed run holds a slot");
  }
  for (const rec of d.records.values()) {
    if (rec.trigger !== "manual")
      assert.equal(
        rec.run_id,
        runIdFor(JOB, Date.parse(rec.scheduled_for)),
        "run id = runIdFor(job, scheduled_for)",
      );
  }
  // A slot is held by an active run, or by a cancelled one whose worker may still be killing it.
  const draining = (s.draining ?? []).map((x) => x.run_id);
  assert.ok(
    s.runs.length + draining.length <= d.config.maxActiveRuns,
    `active ${s.runs.length} + draining ${draining.length} within maxActiveRuns`,
  );
  for (const slot of d.slots)
    assert.ok(
      ids.includes(slot) || draining.includes(slot),
      `slot held by ${slot}, which is neither active nor draining`,
    );
  assert.ok(d.slots.size <= s.runs.length + draining.length);
  if (s.deleted) assert.equal(s.runs.length, 0, "a deleted job has no active runs");
}

describe("job actor: property", () => {
  it("invariants hold after every step of random interleavings", () => {
    fc.assert(
      fc.property(scenario, (sc) => {
        const d = new Driver(
          cfg({ leaseTtlMs: 5_000, queueLimit: 2, catchUpLimit: 1_000, maxActiveRuns: 8 }),
          { autoGrant: sc.autoGrant, autoClaim: sc.autoClaim, freeze: true },
        );
        d.create(
          spec({
            overlap: sc.overlap,
            misfire: { policy: sc.policy, starting_deadline_s: sc.deadline },
            retry: { max_attempts: sc.maxAttempts, backoff: "exponential", base_s: 1, max_s: 10 },
            flex_window_s: sc.flex,
          }),
        );
        let prev = d.state.fence_seq;
        for (const o of sc.ops) {
          step(d, o);
          check(d, prev);
          prev = d.state.fence_seq;
        }
      }),
      { seed: 20260101, numRuns: 400 },
    );
  });
});
