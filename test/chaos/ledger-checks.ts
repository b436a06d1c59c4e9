/**
 * The ledger chaos test's invariants, as pure functions of what was recorded: the executions the
 * tasks wrote (or the Docker engine reported), the faults injected, the user's changes to jobs and
 * the run records the API returned. Unit-tested in test/chaos/ledger.test.ts (each check shown to
 * fire), applied by test/chaos/ledger-harness.ts.
 *
 *   (a) no attempt (run_id, fence) executes more than once;
 *   (b) no two executions of one run overlap in time;
 *   (c) every occurrence the job calls for has exactly one run record; one a user's change left
 *       ambiguous (the change applied somewhere between its send and its acknowledgement) at most
 *       one; one the job no longer called for (paused, another schedule, deleted) none or a
 *       `cancelled` one, and no execution (unless its worker or NATS had a fault since the change:
 *       the cancel could not reach it — counted); an occurrence called for is `cancelled` by a
 *       pause or a schedule change only if it was the next one when the change applied (README:
 *       it stays cancelled, also after a resume or under a new schedule that contains it); no
 *       more manual runs than run-now requests;
 *   (d) no run still non-terminal once the lease TTL plus the retry bound has passed (harness);
 *   (e) no tenant has more distinct runs executing at once than its max_concurrent_runs;
 *   (f) no run executes again after one of its executions ended by itself — unless that
 *       execution's worker had a hard fault or a NATS server had any, in between: then it is an
 *       at-least-once re-run, counted and listed apart (`reruns`), never hidden;
 *   (g) a run's outcome has an execution behind it: `succeeded` needs one that ended by itself,
 *       `failed`/`timed_out` (dead-lettered) at least one — a run that never executed is never
 *       dead-lettered (the only exception: its owner heard an attempt start and the worker was
 *       killed -9 within 2 s, before the task could write its first line).
 */
import { runIdFor } from "../../src/protocol/ids.ts";
import type {
  Exec,
  Expectation,
  FaultRecord,
  Hit,
  JobInfo,
  JobPhase,
  Rerun,
  RunRec,
  Violation,
} from "./ledger-types.ts";

export const iso = (ms: number): string => new Date(ms).toISOString();

const hitsOf = (faults: FaultRecord[]): Hit[] => faults.flatMap((f) => f.hits);

export function faultsNear(
  faults: FaultRecord[],
  atMs: number,
  workers: string[],
  ttl: number,
): string[] {
  return faults
    .filter((f) => atMs >= f.atMs - 2000 && atMs <= (f.recoveredMs ?? f.liftedMs) + 2 * ttl + 5000)
    .map(
      (f) =>
        `${f.kind}(${f.target}${f.hits.some((h) => workers.includes(h.target)) ? ", involved" : ""}) at ${iso(f.atMs)}`,
    );
}

/**
 * Did `worker` have a hard fault, or any NATS server a fault, overlapping [fromMs, toMs]? A fault
 * the cluster never recovered from stays open (its effects may last).
 */
export function faultedBetween(hits: Hit[], worker: string, fromMs: number, toMs: number): boolean {
  return hits.some(
    (h) =>
      ((h.target === worker && h.hard) || h.target.startsWith("nats:")) &&
      h.atMs <= toMs &&
      (h.untilMs ?? Number.POSITIVE_INFINITY) >= fromMs,
  );
}

/** Closes executions left without an end: at their worker's next kill -9, else at `endMs`. */
export function closeOpen(execs: Exec[], killTimes: Map<string, number[]>, endMs: number): number {
  let open = 0;
  for (const e of execs) {
    if (e.endMs !== undefined) continue;
    const k = (killTimes.get(e.worker) ?? [])
      .filter((t) => t >= e.startMs)
      .sort((a, b) => a - b)[0];
    if (k !== undefined) {
      e.endMs = k;
      e.how = "kill9";
    } else {
      e.endMs = endMs;
      open++;
    }
  }
  return open;
}

/** A run record's attempts, for a report: worker, start, outcome, error. */
const attemptsOf = (r: RunRec): string =>
  JSON.stringify(r.attempts.map((x) => [x.worker, x.started_at, x.outcome, x.error ?? null]));

const desc = (e: Exec) =>
  `attempt ${e.attempt} fence ${e.fence} on ${e.worker} ${iso(e.startMs)}..${e.endMs === undefined ? "?" : iso(e.endMs)} (${e.how})`;

function groupBy<T>(xs: T[], key: (x: T) => string): Map<string, T[]> {
  const m = new Map<string, T[]>();
  for (const x of xs) {
    const k = key(x);
    const g = m.get(k);
    if (g) g.push(x);
    else m.set(k, [x]);
  }
  return m;
}

export function checkAttempts(
  execs: Exec[],
  faults: FaultRecord[],
  ttl: number,
): { a: Violation[]; b: Violation[] } {
  const a: Violation[] = [];
  const b: Violation[] = [];
  for (const [k, es] of groupBy(execs, (e) => `${e.run}/${e.fence}`)) {
    if (es.length < 2) continue;
    const workers = [...new Set(es.map((e) => e.worker))];
    a.push({
      invariant: "a",
      text: `attempt ${k} executed ${es.length} times on ${workers.join(", ")}: ${es.map(desc).join("; ")}`,
      faults: faultsNear(faults, es[1]!.startMs, workers, ttl),
    });
  }
  for (const [run, es] of groupBy(execs, (e) => e.run)) {
    const sorted = [...es].sort((x, y) => x.startMs - y.startMs);
    for (let i = 0; i < sorted.length; i++) {
      for (let j = i + 1; j < sorted.length; j++) {
        const x = sorted[i]!;
        const y = sorted[j]!;
        if (y.startMs < (x.endMs ?? Number.POSITIVE_INFINITY)) {
          const why =
            x.fence === y.fence
              ? "the same attempt twice"
              : x.fence > y.fence
                ? "an older attempt started after a newer one was running"
                : "a newer attempt started while an older execution was still running";
          b.push({
            invariant: "b",
            text: `run ${run}: ${desc(x)} overlaps ${desc(y)} by ${(x.endMs ?? 0) - y.startMs} ms (${why})`,
            faults: faultsNear(faults, y.startMs, [x.worker, y.worker], ttl),
          });
        }
      }
    }
  }
  return { a, b };
}

/**
 * (f) and the at-least-once re-runs: each execution that started after an execution of the same
 * run had ended by itself (its end line, no TERM after it; in Docker exit 0) is either excused —
 * every such earlier execution's worker had a hard fault, or a NATS server a fault, between that
 * execution's start and this one's: an at-least-once re-run — or a violation (one per run shown).
 * A graceful drain or stop excuses nothing: a drained worker reports what it finished.
 */
export function checkRunAgain(
  execs: Exec[],
  faults: FaultRecord[],
  ttl: number,
): { f: Violation[]; reruns: Rerun[] } {
  const f: Violation[] = [];
  const reruns: Rerun[] = [];
  const hits = hitsOf(faults);
  for (const [run, es] of groupBy(execs, (e) => e.run)) {
    const sorted = [...es].sort((x, y) => x.startMs - y.startMs);
    const done = sorted.filter((x) => x.how === "end");
    let shown = false;
    for (const again of sorted) {
      const before = done.filter((d) => d !== again && d.endMs! <= again.startMs);
      if (before.length === 0) continue;
      const bad = before.find((d) => !faultedBetween(hits, d.worker, d.startMs, again.startMs));
      const d = bad ?? before[0]!;
      const text = `run ${run}: attempt ${again.attempt} fence ${again.fence} on ${again.worker} started ${iso(again.startMs)} after attempt ${d.attempt} fence ${d.fence} on ${d.worker} ended by itself ${iso(d.endMs!)}`;
      const near = faultsNear(faults, again.startMs, [d.worker, again.worker], ttl);
      if (!bad)
        reruns.push({
          run,
          text: `${text} (a hard fault on that worker or NATS between)`,
          faults: near,
        });
      else if (!shown) {
        shown = true;
        f.push({
          invariant: "f",
          text: `${text}, with no hard fault on that worker or NATS between`,
          faults: near,
        });
      }
    }
  }
  return { f, reruns };
}

/** Most distinct runs of each tenant executing at once, and the episodes above its cap. */
export function checkTenantCaps(
  execs: Exec[],
  caps: Map<string, number>,
  faults: FaultRecord[],
  ttl: number,
): { max: Map<string, number>; e: Violation[] } {
  const max = new Map<string, number>();
  const e: Violation[] = [];
  for (const [tenant, xs] of groupBy(execs, (x) => x.tenant)) {
    const points = xs.flatMap((x) => [
      { t: x.startMs, d: 1, x },
      { t: x.endMs ?? Number.POSITIVE_INFINITY, d: -1, x },
    ]);
    points.sort((p, q) => p.t - q.t || p.d - q.d); // an end at the same ms as a start counts first
    const openRuns = new Map<string, number>();
    let peak = 0;
    let over = false;
    const cap = caps.get(tenant);
    for (const p of points) {
      const n = (openRuns.get(p.x.run) ?? 0) + p.d;
      if (n <= 0) openRuns.delete(p.x.run);
      else openRuns.set(p.x.run, n);
      peak = Math.max(peak, openRuns.size);
      if (cap !== undefined && openRuns.size > cap && !over) {
        over = true;
        e.push({
          invariant: "e",
          text: `tenant ${tenant} (cap ${cap}) had ${openRuns.size} runs executing at ${iso(p.t)}: ${[...openRuns.keys()].join(", ")}`,
          faults: faultsNear(faults, p.t, [], ttl),
        });
      }
      if (cap !== undefined && openRuns.size <= cap) over = false;
    }
    max.set(tenant, peak);
  }
  return { max, e };
}

// ---------------------------------------------------------------------------------------------
// (c): occurrences against the job's phases

const onGrid = (p: JobPhase, t: number) =>
  !p.deleted && p.enabled && (Math.floor(t / 1000) % 60) % p.step === 0;

/**
 * What the job's phases expect at occurrence instant `t` (whole seconds), and the phase in effect:
 * before a change was sent the earlier phase holds; after it was acknowledged the new one; in
 * between either (the change applied at some instant the test cannot see).
 */
export function expectAt(j: JobInfo, t: number): { expect: Expectation; phase: JobPhase } {
  let cur = j.phases[0]!;
  for (const p of j.phases.slice(1)) {
    if (t <= p.sentMs) break;
    if (p.ackMs === undefined || t <= p.ackMs)
      return { expect: onGrid(cur, t) || onGrid(p, t) ? "maybe" : "none", phase: p };
    cur = p;
  }
  return { expect: onGrid(cur, t) ? "one" : "none", phase: cur };
}

/** The first instant after `ms` on the phase's grid. */
function gridAfter(p: JobPhase, ms: number): number {
  let t = Math.floor(ms / 1000) * 1000 + 1000;
  while ((Math.floor(t / 1000) % 60) % p.step !== 0) t += 1000;
  return t;
}

/**
 * The documented exception (README, "stay cancelled"): the occurrence that was next when a pause
 * or a schedule change applied — prepared ahead, or not yet fired — is cancelled by it and stays
 * cancelled, even when a resume before its due time or the new schedule calls for it again.
 * `t` is that occurrence for some change whose reason the record gives: on the grid before the
 * change and no later than the first instant of that grid after the change's acknowledgement.
 */
export function cancelledAtChange(j: JobInfo, t: number, reason: string): boolean {
  return j.phases.some((c, k) => {
    const q = k > 0 ? j.phases[k - 1]! : undefined;
    const says =
      c.change === "pause"
        ? reason.startsWith("job paused before")
        : c.change === "patch"
          ? reason.startsWith("schedule changed before")
          : false;
    return (
      says &&
      q !== undefined &&
      onGrid(q, t) &&
      (c.ackMs === undefined || t <= gridAfter(q, c.ackMs))
    );
  });
}

/**
 * A pause cancels every run of its job not started by then, whatever its occurrence (README,
 * "A pause stops what has not started"): `t`'s run, cancelled "job paused before it started", is
 * explained by a pause (one of the user's, or the harness's final one) answered no earlier than
 * `t` was due, before which none of its executions had started.
 */
export function cancelledUnstartedByPause(
  j: JobInfo,
  t: number,
  reason: string,
  execs: readonly Exec[],
  ttl = 0,
): boolean {
  if (!reason.startsWith("job paused before")) return false;
  const pauses = [
    ...j.phases.filter((p) => p.change === "pause"),
    ...(j.finalPause ? [j.finalPause] : []),
  ];
  // An execution whose start had not reached the owner at the pause (up to a lease TTL before it)
  // is stopped with the rest: it must end within the lease and drain grace after the answer.
  const killedAfter = (p: { sentMs: number; ackMs?: number | undefined }, e: Exec) =>
    e.startMs >= p.sentMs - ttl &&
    (e.endMs ?? Number.POSITIVE_INFINITY) <=
      (p.ackMs ?? Number.POSITIVE_INFINITY) + 2 * ttl + 10_000;
  return pauses.some(
    (p) =>
      t <= (p.ackMs ?? Number.POSITIVE_INFINITY) &&
      execs.every((e) => e.startMs >= p.sentMs || killedAfter(p, e)),
  );
}

/** How long after its due time a change may still find an occurrence not fired (its owner down). */
export const LATE_FIRE_MS = 30_000;

/**
 * An occurrence due just before a pause, schedule change or delete was sent, while a fault kept
 * its owner from firing it on time: the change stops calling for it before it is fired, and it
 * has no record (the simulation's LATE_FIRE_MS allowance; README, Known limitations).
 */
export function unfiredAtChange(
  j: JobInfo,
  t: number,
  faults: FaultRecord[],
  ttl: number,
): boolean {
  return (
    j.phases.some(
      (p) =>
        p.change !== "create" &&
        p.change !== "resume" &&
        t <= p.sentMs &&
        p.sentMs - t <= LATE_FIRE_MS,
    ) && faultsNear(faults, t, [], ttl).length > 0
  );
}

/** Where a job's records come from: its listing (live jobs) or a lookup per run id (deleted jobs). */
export interface JobRecords {
  /** Records by occurrence instant (scheduled runs only); for a deleted job, at most one each. */
  bySched: Map<number, RunRec[]>;
  /** Manual runs in the listing (undefined: a deleted job, not listable). */
  manual: number | undefined;
  /** How a missing record was looked up by its run id (`GET <id>: …`), for the report. */
  direct: Map<number, string>;
}

export interface OccurrenceCheck {
  violations: Violation[];
  occurrences: number;
  missing: number;
  duplicate: number;
  /** A record the job no longer called for that is not `cancelled`, or such an occurrence executed with no fault to excuse it. */
  uncalled: number;
  /** An occurrence the job called for, `cancelled` by a schedule change it was not the next occurrence for, or by a pause after it had started. */
  cancelledByChange: number;
  /** More manual runs than run-now requests sent. */
  manualExtra: number;
  /** Occurrences the job no longer called for that executed, their worker or NATS faulted since the change (its cancel could not reach it). */
  cancelledRanUnderFault: number;
  /** Occurrences with no record, due just before a change while a fault kept their owner from firing them (`unfiredAtChange`). */
  unfiredAtChange: number;
}

export function checkOccurrences(
  jobs: JobInfo[],
  records: Map<string, JobRecords>,
  execs: Exec[],
  faults: FaultRecord[],
  ttl: number,
): OccurrenceCheck {
  const out: OccurrenceCheck = {
    violations: [],
    occurrences: 0,
    missing: 0,
    duplicate: 0,
    uncalled: 0,
    cancelledByChange: 0,
    manualExtra: 0,
    cancelledRanUnderFault: 0,
    unfiredAtChange: 0,
  };
  const byRun = groupBy(execs, (e) => e.run);
  const hits = hitsOf(faults);
  const v = (text: string, t: number) =>
    out.violations.push({ invariant: "c", text, faults: faultsNear(faults, t, [], ttl) });
  for (const j of jobs) {
    const rec = records.get(j.jobId);
    if (!rec) continue;
    const name = `job ${j.jobId} (${j.tenant}, overlap ${j.overlap}, misfire ${j.misfire}, ${j.phases.map((p) => `${p.change}${p.deleted ? "" : ` */${p.step}${p.enabled ? "" : " paused"}`}@${iso(p.sentMs)}..${p.ackMs === undefined ? "?" : iso(p.ackMs)}`).join(" → ")})`;
    for (let t = Math.ceil(j.firstMs / 1000) * 1000; t <= j.lastCheckedMs; t += 1000) {
      const { expect, phase } = expectAt(j, t);
      const rs = rec.bySched.get(t) ?? [];
      if (expect === "one") out.occurrences++;
      if (expect === "one" && rs.length === 0 && unfiredAtChange(j, t, faults, ttl)) {
        out.unfiredAtChange++;
      } else if (expect === "one" && rs.length === 0) {
        out.missing++;
        v(`${name}: no run record for ${iso(t)} (${rec.direct.get(t) ?? "?"})`, t);
      } else if (rs.length > 1) {
        out.duplicate++;
        v(
          `${name}: ${rs.length} run records for ${iso(t)}: ${rs.map((r) => `${r.run_id} ${r.status}`).join(", ")}`,
          t,
        );
      } else if (
        expect === "one" &&
        rs[0]!.status === "cancelled" &&
        /^(job paused|schedule changed) before/.test(rs[0]!.reason ?? "") &&
        !cancelledAtChange(j, t, rs[0]!.reason!) &&
        !cancelledUnstartedByPause(j, t, rs[0]!.reason!, byRun.get(rs[0]!.run_id) ?? [], ttl)
      ) {
        out.cancelledByChange++;
        v(
          `${name}: the occurrence ${iso(t)}, called for (${phase.change} acknowledged ${phase.ackMs === undefined ? "never" : iso(phase.ackMs)}), was cancelled by a change it was not next for: ${rs[0]!.reason}${j.finalPause ? ` (final pause sent ${iso(j.finalPause.sentMs)})` : ""}; executions: ${(byRun.get(rs[0]!.run_id) ?? []).map(desc).join("; ") || "none"}; attempts ${attemptsOf(rs[0]!)}`,
          t,
        );
      } else if (expect === "none") {
        // Cancelled by the change, or throttled by a decision made ahead of it (look-ahead).
        if (rs.length === 1 && rs[0]!.status !== "cancelled" && rs[0]!.status !== "throttled") {
          out.uncalled++;
          v(
            `${name}: the occurrence ${iso(t)}, no longer called for (${phase.change} acknowledged ${phase.ackMs === undefined ? "never" : iso(phase.ackMs)}), has a ${rs[0]!.status} record`,
            t,
          );
        }
        for (const e of byRun.get(runIdFor(j.jobId, t)) ?? []) {
          if (faultedBetween(hits, e.worker, phase.sentMs, e.startMs)) {
            out.cancelledRanUnderFault++;
            continue;
          }
          out.uncalled++;
          v(
            `${name}: the occurrence ${iso(t)}, no longer called for (${phase.change} acknowledged ${phase.ackMs === undefined ? "never" : iso(phase.ackMs)}), executed: ${desc(e)}`,
            e.startMs,
          );
        }
      }
    }
    if (rec.manual !== undefined && rec.manual > j.manual.sent) {
      out.manualExtra++;
      v(
        `${name}: ${rec.manual} manual runs for ${j.manual.sent} run-now requests`,
        j.lastCheckedMs,
      );
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// (g): outcomes against executions

const DEAD = new Set(["failed", "timed_out"]);

/**
 * (g) A `succeeded` record needs an execution of that run that ended by itself; a dead-lettered
 * one (`failed`, `timed_out`) at least one execution. Exception: an attempt its owner heard start
 * on a worker whose tasks were killed within 2 s after that start — the worker killed -9, or
 * frozen (SIGSTOP: the task's watchdog kills it) — the task may have died before its first line.
 */
export function checkOutcomes(
  runs: RunRec[],
  execs: Exec[],
  killTimes: Map<string, number[]>,
  faults: FaultRecord[],
  ttl: number,
): Violation[] {
  const g: Violation[] = [];
  const byRun = groupBy(execs, (e) => e.run);
  for (const r of runs) {
    const es = byRun.get(r.run_id) ?? [];
    const attempts = attemptsOf(r);
    if (r.status === "succeeded" && !es.some((e) => e.endLine)) {
      g.push({
        invariant: "g",
        text: `run ${r.run_id} (${r.scheduled_for}) succeeded with no execution that ended by itself (${es.length} executions); attempts ${attempts}`,
        faults: faultsNear(faults, Date.parse(r.scheduled_for), [], ttl),
      });
    } else if (DEAD.has(r.status) && es.length === 0) {
      const killedAtStart = r.attempts.some((x) => {
        if (x.started_at === null || x.worker === null) return false;
        const s = Date.parse(x.started_at);
        return (killTimes.get(x.worker) ?? []).some((k) => k >= s && k <= s + 2000);
      });
      if (killedAtStart) continue;
      g.push({
        invariant: "g",
        text: `run ${r.run_id} (${r.scheduled_for}) ${r.status} without ever executing: ${r.reason ?? ""}; attempts ${attempts}`,
        faults: faultsNear(faults, Date.parse(r.scheduled_for), [], ttl),
      });
    }
  }
  return g;
}
