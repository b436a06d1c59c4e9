/**
 * The simulation's invariants (DESIGN.md "The promises", "Runs, leases and fences"), checked
 * incrementally as events happen (ledger starts and ends, KV writes seen on the shared store) and
 * once at the end (run records against the schedules).
 *
 *  a  attempt_on_two_workers  one (run, fence) executed on two workers
 *  b  run_overlap             two executions of one run overlapping in time
 *  c  occurrence_lost / occurrence_duplicated / unexpected_run
 *                             every occurrence in the window has exactly one run record (or is
 *                             held in its job's overlap queue); no record for a non-occurrence
 *  d  stale_epoch_key         an actor write carrying a lower epoch than one already written for
 *                             that key
 *     (counted, not a violation: `staleLandedUnfenced`) an actor write of an older epoch landing
 *     on a key the new owner has not fenced yet. The host fences a key (CAS with the new epoch)
 *     before its first decision under an epoch, so such a write is read, never overwritten: the
 *     new owner's fence conflicts and it reloads. Preventing even that would cost a write per
 *     actor per takeover, before any message (see ARCHITECTURE.md, promises).
 *  e  tenant_cap              more executions of one tenant at once than its max_concurrent
 *  f  run_stuck               a run still non-terminal long after faults stopped — except a run of a
 *                             tenant whose backlog behind max_concurrent still moves at the end
 *                             (see `saturatedTenants`)
 *  g  skip_overlap            two runs of an overlap=skip job executing at once (the look-ahead
 *                             gate must decide skip/go at the due instant, see job-actor.ts holdOf)
 *  h  run_reexecuted          a run executed again after one of its executions exited 0, when
 *                             neither that execution's worker (crash, pause, isolation) nor the bus
 *                             (loss) had a fault between its start and the new start. The breach
 *                             of the twelfth session: an ended attempt whose report waited past
 *                             its owner's lease, guessed "never started" and offered again. With a
 *                             fault on its worker a re-run is the documented gap (an attempt never
 *                             heard to start, its worker gone or silent, is presumed unstarted).
 */
import type { Buckets } from "../../src/cluster/buckets.ts";
import { decode } from "../../src/cluster/codec.ts";
import type { LeaseValue } from "../../src/cluster/partition-manager.ts";
import type { JobState } from "../../src/jobs/job-state.ts";
import { TERMINAL, type JobSpec, type RunView } from "../../src/jobs/model.ts";
import { compileSchedule } from "../../src/schedule/index.ts";
import { jobIdOfRun } from "../../src/jobs/ids.ts";
import type { Ledger, LedgerEntry } from "./executor.ts";

export interface Violation {
  readonly invariant: string;
  readonly atMs: number;
  readonly detail: string;
  readonly trace: readonly string[];
}

/** The last events of a simulation, for the report of a violation. */
export class Trace {
  readonly #lines: string[] = [];
  constructor(
    private readonly now: () => number,
    private readonly startMs: number,
    private readonly limit = 200,
  ) {}
  /** Every event is also passed here (e.g. printed with `--trace`). */
  echo: ((line: string) => void) | undefined;
  add(text: string): void {
    const line = `${fmt(this.now() - this.startMs)} ${text}`;
    this.echo?.(line);
    this.#lines.push(line);
    if (this.#lines.length > this.limit) this.#lines.splice(0, this.#lines.length - this.limit);
  }
  last(n: number): string[] {
    return this.#lines.slice(-n);
  }
}

export const fmt = (ms: number): string => `t+${(ms / 1000).toFixed(3)}s`;

export interface JobUnderTest {
  tenant: string;
  jobId: string;
  spec: JobSpec;
}

export class Checker {
  readonly violations: Violation[] = [];
  readonly #seen = new Set<string>();
  readonly #maxEpochOfKey = new Map<string, number>();
  readonly #maxEpochOfPartition = new Map<number, number>();
  /** Writes of an older epoch that landed on a key not yet fenced under the newer one. */
  staleLandedUnfenced = 0;
  readonly #workersOfAttempt = new Map<string, string>();
  /** Jobs with overlap=skip (filled as the simulation creates them). */
  readonly skipJobs = new Set<string>();
  /** The executions of each run that exited 0 (invariant h). */
  readonly #succeeded = new Map<string, LedgerEntry[]>();
  /** Fault windows by subject (a process id, "bus" or "kv"; h exempts a worker's own and the bus); `toMs` null while the fault lasts. */
  readonly #faults: { subject: string; fromMs: number; toMs: number | null }[] = [];

  /** A fault on `subject` begins now; the returned function ends it. */
  faultBegins(subject: string): () => void {
    const f: { subject: string; fromMs: number; toMs: number | null } = { subject, fromMs: this.now(), toMs: null };
    this.#faults.push(f);
    return () => {
      f.toMs = this.now();
    };
  }

  /** Whether any of `subjects` had a fault overlapping [fromMs, toMs]. */
  #faulted(subjects: readonly string[], fromMs: number, toMs: number): boolean {
    return this.#faults.some((f) => subjects.includes(f.subject) && f.fromMs <= toMs && (f.toMs ?? Number.POSITIVE_INFINITY) >= fromMs);
  }

  constructor(
    private readonly trace: Trace,
    private readonly now: () => number,
    private readonly startMs: number,
    private readonly caps: ReadonlyMap<string, number>,
  ) {}

  /** Records a violation (the first of each invariant and subject only). */
  fail(invariant: string, subject: string, detail: string): void {
    const k = `${invariant}|${subject}`;
    if (this.#seen.has(k)) return;
    this.#seen.add(k);
    this.trace.add(`!! VIOLATION ${invariant}: ${detail}`);
    this.violations.push({ invariant, atMs: this.now() - this.startMs, detail, trace: this.trace.last(30) });
  }

  watchLedger(ledger: Ledger): void {
    ledger.onStart = (x, active) => {
      this.trace.add(`start ${x.runId} attempt ${x.attempt} fence ${x.fence} on ${x.worker}`);
      const k = `${x.runId}|${x.fence}`;
      const other = this.#workersOfAttempt.get(k);
      if (other !== undefined && other !== x.worker) {
        this.fail("attempt_on_two_workers", k, `run ${x.runId} fence ${x.fence} executed on ${other} and ${x.worker}`);
      }
      this.#workersOfAttempt.set(k, x.worker);
      const overlap = [...active].find((y) => y !== x && y.runId === x.runId);
      if (overlap) {
        this.fail("run_overlap", x.runId, `run ${x.runId}: attempt ${x.attempt} (fence ${x.fence}) on ${x.worker} started while attempt ${overlap.attempt} (fence ${overlap.fence}) on ${overlap.worker} still ran (since ${fmt(overlap.startMs - this.startMs)})`);
      }
      const jobId = jobIdOfRun(x.runId);
      if (jobId !== null && this.skipJobs.has(jobId)) {
        const other = [...active].find((y) => y !== x && y.runId !== x.runId && jobIdOfRun(y.runId) === jobId);
        if (other) this.fail("skip_overlap", x.runId, `job ${jobId} (overlap skip): run ${x.runId} started while run ${other.runId} still ran (since ${fmt(other.startMs - this.startMs)})`);
      }
      // Every earlier success, not only the first: one excused by a fault must not hide a later one.
      const ok = this.#succeeded.get(x.runId)?.find((y) => !this.#faulted([y.worker, "bus"], y.startMs, x.startMs));
      if (ok) {
        this.fail("run_reexecuted", x.runId, `run ${x.runId}: attempt ${x.attempt} (fence ${x.fence}) on ${x.worker} started after attempt ${ok.attempt} (fence ${ok.fence}) on ${ok.worker} exited 0 at ${fmt((ok.endMs ?? 0) - this.startMs)}, with no fault on that worker or the bus since its start`);
      }
      const cap = this.caps.get(x.tenant);
      const n = [...active].filter((y) => y.tenant === x.tenant).length;
      if (cap !== undefined && n > cap) {
        this.fail("tenant_cap", `${x.tenant}|${x.runId}`, `tenant ${x.tenant} has ${n} executions at once (cap ${cap}): ${[...active].filter((y) => y.tenant === x.tenant).map(label).join(", ")}`);
      }
    };
    ledger.onEnd = (x) => {
      this.trace.add(`end ${x.runId} attempt ${x.attempt} fence ${x.fence} on ${x.worker}: ${x.outcome}`);
      if (x.outcome === "exit 0") this.#succeeded.set(x.runId, [...(this.#succeeded.get(x.runId) ?? []), x]);
    };
  }

  /** Watches the shared (fault-free) store: every lease and actor write as it lands. */
  async watchStore(shared: Buckets): Promise<void> {
    await shared.leases.watch("p.*", (c) => {
      if (!c.value) return;
      const v = decode<LeaseValue>(c.value);
      const p = Number(c.key.slice(2));
      const epoch = v.epoch === 0 ? c.revision : v.epoch;
      if (epoch > (this.#maxEpochOfPartition.get(p) ?? 0)) {
        this.#maxEpochOfPartition.set(p, epoch);
        this.trace.add(`lease p.${p} epoch ${epoch} → ${v.owner}/${v.incarnation}`);
      }
    });
    await shared.actors.watch(">", (c) => {
      if (!c.value) return;
      const v = decode<{ e: number; w: string }>(c.value);
      const p = Number(c.key.split(".")[1]);
      const maxKey = this.#maxEpochOfKey.get(c.key) ?? 0;
      if (v.e < maxKey) {
        this.fail("stale_epoch_key", c.key, `${c.key} written by ${v.w} under epoch ${v.e} after epoch ${maxKey} had written it (revision ${c.revision})`);
      }
      this.#maxEpochOfKey.set(c.key, Math.max(maxKey, v.e));
      const maxP = this.#maxEpochOfPartition.get(p) ?? 0;
      if (v.e < maxP) this.staleLandedUnfenced++;
    });
  }

  /**
   * End of the simulation: every occurrence due in (created, windowEndMs] has one run record (or
   * sits in its job's overlap queue), and no run created before `stuckBeforeMs` is still active.
   */
  async final(shared: Buckets, jobs: readonly JobUnderTest[], windowEndMs: number, stuckBeforeMs: number, saturated: ReadonlySet<string> = new Set()): Promise<void> {
    for (const j of jobs) {
      const states = await shared.actors.list(`job.*.${j.tenant}.${j.jobId}`);
      const state = states[0] ? decode<{ s: JobState }>(states[0].value).s : undefined;
      if (!state?.job) {
        this.fail("occurrence_lost", j.jobId, `job ${j.tenant}/${j.jobId} has no state: its create never landed`);
        continue;
      }
      const sched = compileSchedule(j.spec.schedule);
      const expected: number[] = [];
      for (let t = sched.next(state.job.created_at_ms, 1)[0]; t !== undefined && t <= windowEndMs; t = sched.next(t, 1)[0]) expected.push(t);
      const records = (await shared.runs.list(`*.${j.tenant}.${j.jobId}.*`)).map((e) => decode<RunView>(e.value));
      const byTime = new Map<number, RunView[]>();
      for (const r of records) {
        const t = Date.parse(r.scheduled_for);
        byTime.set(t, [...(byTime.get(t) ?? []), r]);
      }
      const want = new Set(expected);
      for (const o of expected) {
        const n = byTime.get(o)?.length ?? 0;
        if (n === 0 && !state.queued.includes(o)) {
          this.fail("occurrence_lost", `${j.jobId}|${o}`, `job ${j.jobId} (${describe(j.spec)}): occurrence ${new Date(o).toISOString()} has no run record`);
        } else if (n > 1) {
          this.fail("occurrence_duplicated", `${j.jobId}|${o}`, `job ${j.jobId}: occurrence ${new Date(o).toISOString()} has ${n} run records`);
        }
      }
      for (const r of records) {
        const t = Date.parse(r.scheduled_for);
        if (t <= windowEndMs && !want.has(t) && r.trigger !== "manual") {
          this.fail("unexpected_run", r.run_id, `job ${j.jobId}: run ${r.run_id} for ${r.scheduled_for}, not an occurrence of its schedule`);
        }
        // Judged from the record's creation: an overlap=queue occurrence is created when it leaves the queue.
        // A tenant whose backlog behind its cap still moves: its runs wait (queued), back off
        // between attempts (retry_wait) or have only just got their turn (leased/running).
        const backlog = saturated.has(j.tenant);
        if (!TERMINAL.has(r.status) && !backlog && Date.parse(r.created_at) <= stuckBeforeMs) {
          this.fail("run_stuck", r.run_id, `job ${j.jobId} (${describe(j.spec)}): run ${r.run_id} for ${r.scheduled_for} (created ${r.created_at}) still ${r.status} (attempt ${r.attempt}) at the end`);
        }
      }
    }
  }
}

function label(x: LedgerEntry): string {
  return `${x.runId}#${x.attempt}/f${x.fence}@${x.worker}`;
}

function describe(spec: JobSpec): string {
  return "cron" in spec.schedule ? `cron ${spec.schedule.cron}, overlap ${spec.overlap}` : `at ${spec.schedule.at}`;
}

/**
 * Tenants with a backlog that still moves: at least `cap` of their executions started in the last
 * 15 s of the run and they had one running at least 60% of that time (sampled every 250 ms from
 * the ledger). Their queued runs wait behind their cap — max_concurrent, or their fair share of
 * the fleet when that is lower (the caller passes the lower) — they are not stuck. A tenant
 * stalled by leaked grants starts nothing and is not exempted.
 */
export function saturatedTenants(ledger: readonly LedgerEntry[], caps: ReadonlyMap<string, number>, endMs: number): Set<string> {
  const out = new Set<string>();
  const from = endMs - 15_000;
  for (const [tenant, cap] of caps) {
    const mine = ledger.filter((x) => x.tenant === tenant);
    const started = mine.filter((x) => x.startMs >= from).length;
    let busy = 0;
    let samples = 0;
    for (let t = from; t <= endMs; t += 250, samples++) {
      if (mine.some((x) => x.startMs <= t && (x.endMs === null || x.endMs > t))) busy++;
    }
    if (started >= cap && busy >= 0.6 * samples) out.add(tenant);
  }
  return out;
}
