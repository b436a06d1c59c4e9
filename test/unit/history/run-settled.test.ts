/**
 * A settle that wrote (over the orphan of a look-ahead fire whose state change was lost) is
 * indexed by `run_settled`, which also marks the occurrence handled: a resume before it does not
 * fire it again, so its `create` (which would meet the settled record) cannot index it a second
 * time. Fails when `run_settled` only indexes.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { jobActorId, runIdFor } from "../../../src/protocol/ids.ts";
import { makeJobActor } from "../../../src/jobs/job-actor.ts";
import { DEFAULT_JOB_CONFIG, type JobMsg } from "../../../src/job-state/job-types.ts";
import { emptyJobState, type JobState } from "../../../src/job-state/job-state.ts";
import type { JobSpec } from "../../../src/protocol/model.ts";
import { RUN_INDEX_CHUNK, isRunIndexEffect, runIdSuffix } from "../../../src/history/run-index.ts";
import { withRunIndex } from "../../../src/jobs/with-history.ts";

const TENANT = "t1";
const JOB = "j0123456789abcdef";
const ACTOR = jobActorId(TENANT, JOB);
const T0 = Date.UTC(2026, 0, 1);
const SPEC: JobSpec = {
  name: null,
  schedule: { cron: "* * * * *", time_zone: "UTC" },
  task: { image: "busybox", args: ["true"], env: {}, timeout_s: 60 },
  retry: { max_attempts: 1, backoff: "exponential", base_s: 1, max_s: 60 },
  overlap: "allow",
  misfire: { policy: "skip", starting_deadline_s: null },
  flex_window_s: 0,
  enabled: true,
};

describe("runs index: a settled orphan and a resume before its occurrence", () => {
  it("the settled occurrence stays cancelled and is indexed once", () => {
    const def = withRunIndex(makeJobActor(DEFAULT_JOB_CONFIG));
    const chunks: string[][] = [];
    let s: JobState = emptyJobState();
    const step = (msg: unknown, nowMs: number, keep = true) => {
      const d = def.receive(s, msg as JobMsg, { id: ACTOR, nowMs });
      if (keep) {
        s = d.state;
        for (const fx of (d.pre ?? []).filter(isRunIndexEffect)) chunks[fx.seq] = [...fx.ids];
      }
      return d;
    };
    step({ kind: "create", tenant_id: TENANT, job_id: JOB, spec: SPEC, request_hash: "h" }, T0);
    const fireAt = () => (s.next_run_at_ms ?? 0) - 60_000; // look-ahead: at most this early
    // A full chunk pending but one, so the next entry closes the chunk.
    s = {
      ...s,
      index: { seq: 0, pending: Array.from({ length: RUN_INDEX_CHUNK - 1 }, (_, i) => `x${i}`) },
    };
    const O = s.next_run_at_ms!;
    const O_ID = runIdFor(JOB, O);
    // 1. A look-ahead fire prepares O: its record is created (pre), its state change is lost.
    let t = Math.max(fireAt(), T0 + 1);
    let f1 = step({ kind: "fire" }, t, false);
    for (
      let tries = 0;
      !(f1.pre ?? []).some(
        (fx) => (fx as { record?: { run_id: string } }).record?.run_id === O_ID,
      ) && tries < 120;
      tries++
    ) {
      t += 1000;
      f1 = step({ kind: "fire" }, t, false);
    }
    assert.ok(t < O, `the fire prepared O ahead (t=${t - O} ms from O)`);
    // 2. A pause settles O: the orphan is there, the settle writes; the shell tells run_settled.
    const pause = step({ kind: "patch", patch: { enabled: false }, request_id: "p1" }, t + 1);
    assert.ok((pause.pre ?? []).some((fx) => (fx as { mode?: string }).mode === "settle"));
    step({ kind: "run_settled", run_id: O_ID }, t + 2);
    // 3. Resumed before O: O was prepared, so it stays cancelled; the next run is the one after.
    step({ kind: "patch", patch: { enabled: true }, request_id: "p2" }, t + 3);
    assert.ok(s.next_run_at_ms! > O, "resume before O: the next run is after O");
    step({ kind: "fire" }, t + 4);
    const listed = [...chunks.flat(), ...s.index!.pending].filter(
      (x) => x === runIdSuffix(JOB, O_ID),
    );
    assert.equal(listed.length, 1, `O listed ${listed.length} times in the index`);
  });
});
