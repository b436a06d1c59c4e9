/**
 * The simulation's invariants (docs/design.md "The promises", "Runs, leases and fences"), checked
 * incrementally as events happen (ledger starts and ends, worker reports, KV writes seen on the
 * shared store) and once at the end (record-check.ts: run records against the schedules, the
 * users' commands and the ledger). Every one is computed from the executor's ledger (what ran,
 * where, when), not from what the system says about itself, and each has a self-test showing it
 * can fire (test/unit/sim-invariants.test.ts).
 *
 *  a  attempt_on_two_workers  one (run, fence) executed on two workers
 *  b  run_overlap             two executions of one run overlapping in time
 *  c  occurrence_lost / occurrence_duplicated / unexpected_run / status_unexplained (record-check.ts);
 *     run_unlisted / run_listed_twice / run_listed_stale: the runs list, paged as the API pages
 *     it (through a replica minutes behind), against the records (list-check.ts)
 *  d  stale_epoch_key         an actor write carrying a lower epoch than one already written for
 *                             that key
 *     (counted, not a violation: `staleLandedUnfenced`) an actor write of an older epoch landing
 *     on a key the new owner has not fenced yet. The host fences a key (CAS with the new epoch)
 *     before its first decision under an epoch, so such a write is read, never overwritten: the
 *     new owner's fence conflicts and it reloads. Preventing even that would cost a write per
 *     actor per takeover, before any message (ARCHITECTURE.md, "Design decisions").
 *  e  tenant_cap              more executions of one tenant at once than its max_concurrent
 *  f  run_stuck               (record-check.ts)
 *  g  skip_overlap            two runs of an overlap=skip job executing at once (the look-ahead
 *                             gate must decide skip/go at the due instant, see job-actor.ts holdOf)
 *  h  run_reexecuted          a run executed again after one of its executions exited 0. The one
 *                             exception is delivery's documented at-least-once case, counted and
 *                             reported (`atLeastOnce`), never silent: the worker that ran the
 *                             successful execution could not report it to the job's owner —
 *                             between the task's end and the new start the worker's process died,
 *                             was stopped or restarted, was paused, or was cut off from the bus
 *                             (`blocksReports`), or the bus between it and a node that owned the
 *                             job's partition then was cut (that node isolated from the bus, or
 *                             the two cut apart) — and the owner had not taken its report (a report
 *                             the owner answered ok, followed by another execution, is a violation
 *                             whatever the faults). A crashed, stopped, paused or stalled owner is
 *                             no excuse: the report waits, or reaches the next owner, which asks
 *                             the worker before it offers the run again.
 *  i  attempt_unexecuted      (record-check.ts)
 *  j  started_early           a scheduled run's execution began more than START_TOLERANCE_MS
 *                             before its scheduled_for (true time), beyond what the schedulers'
 *                             own clocks, ahead of true time, account for
 *  m  manual_run_lost         (record-check.ts)
 */
import type { Buckets } from "../../src/cluster/buckets.ts";
import { decode } from "../../src/cluster/codec.ts";
import type { LeaseValue } from "../../src/cluster/partition-manager.ts";
import type { JobState } from "../../src/job-state/job-state.ts";
import type { RunView } from "../../src/protocol/model.ts";
import { jobIdOfRun } from "../../src/protocol/ids.ts";
import { START_SKEW_TOLERANCE_MS } from "../../src/protocol/worker.ts";
import type { Ledger, LedgerEntry } from "./executor.ts";
import {
  checkRecords,
  isManual,
  type CommandRecord,
  type RecordCheckInput,
} from "./record-check.ts";

export type { JobUnderTest } from "./record-check.ts";

/**
 * How much earlier than its scheduled_for a worker may start a scheduled run (j): the documented
 * tolerance, by the owner's clock (src/protocol/worker.ts).
 */
export const START_TOLERANCE_MS = START_SKEW_TOLERANCE_MS;

/** The faults the simulation injects (cluster.ts `planFaults`), by what they do to their subject. */
export type FaultKind =
  | "crash"
  | "stop"
  | "restart"
  | "drain_restart"
  | "pause"
  | "stall"
  | "isolate"
  | "isolate_bus"
  | "isolate_kv"
  | "cut"
  | "thread_cut"
  | "thread_death"
  | "kv_timeouts"
  | "kv_stale"
  | "kv_stale_all"
  | "lossy_bus"
  | "clock_step"
  | "clock_drift";

/**
 * Whether a fault of this kind on a worker keeps it from reporting a completion (h's exemption):
 * its process gone, frozen, or without a path to the schedulers. Not: KV only (workers report
 * over the bus), its clock, a lossy bus (reports and probes are sent again). On the job's owner,
 * only the bus ones count (`cutsOwner`).
 */
export function blocksReports(kind: FaultKind): boolean {
  switch (kind) {
    case "crash":
    case "stop":
    case "restart":
    case "drain_restart":
    case "pause":
    case "stall":
    case "isolate":
    case "isolate_bus":
    case "cut":
      return true;
    case "isolate_kv":
    case "thread_cut":
    case "thread_death":
    case "kv_timeouts":
    case "kv_stale":
    case "kv_stale_all":
    case "lossy_bus":
    case "clock_step":
    case "clock_drift":
      return false;
  }
}

/** Whether a fault of this kind on a node that owns a job cuts its workers' reports off (h). */
function cutsOwner(kind: FaultKind): boolean {
  return kind === "isolate" || kind === "isolate_bus" || kind === "cut";
}

interface FaultWindow {
  readonly subjects: readonly string[];
  readonly kind: FaultKind;
  readonly fromMs: number;
  toMs: number | null;
}

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

export class Checker {
  readonly violations: Violation[] = [];
  readonly #seen = new Set<string>();
  readonly #maxEpochOfKey = new Map<string, number>();
  readonly #maxEpochOfPartition = new Map<number, number>();
  /** Writes of an older epoch that landed on a key not yet fenced under the newer one. */
  staleLandedUnfenced = 0;
  /** h's documented exception: executions of a run after one that exited 0 on a worker that could not report it. */
  readonly atLeastOnce: string[] = [];
  /** i's documented exception (record-check.ts): attempts counted unexecuted past MAX_UNSTARTED_ATTEMPTS. */
  unstartedCap = 0;
  /** c/p's: runs recorded as their execution ended after a fault lost their stop (record-check.ts `lostStopOutcome`). */
  readonly lostStops: string[] = [];
  readonly #workersOfAttempt = new Map<string, string>();
  /** Jobs with overlap=skip (filled as the simulation creates them). */
  readonly skipJobs = new Set<string>();
  /** The executions of each run that exited 0 (invariant h). */
  readonly #succeeded = new Map<string, LedgerEntry[]>();
  /** When the owner answered a worker's completion report ok (`run#attempt@worker` → sim ms). */
  readonly #reported = new Map<string, number>();
  /** When a worker first accepted an attempt's offer (`run#attempt@worker` → sim ms). */
  readonly #accepted = new Map<string, number>();
  readonly #faults: FaultWindow[] = [];
  /**
   * The largest amount a scheduler's wall clock ran ahead of true time from a while before
   * `acceptedAtMs` (the worker's first acceptance of the attempt starting now: its offer read the
   * owner's clock then) to now (j).
   */
  schedulersAheadMs: (acceptedAtMs: number) => number = () => 0;
  /** The partition of a job's actor (h: who owned it). */
  partitionOfJob: (tenant: string, job: string) => number = () => 0;
  /** Each partition's owners (node ids) over time, from the leases bucket. */
  readonly #owners = new Map<number, { atMs: number; owner: string }[]>();

  constructor(
    private readonly trace: Trace,
    private readonly now: () => number,
    private readonly startMs: number,
    private readonly caps: ReadonlyMap<string, number>,
  ) {}

  /** A fault of `kind` on `subjects` (process ids, "bus" or "kv") begins now; the returned function ends it. */
  faultBegins(subjects: readonly string[], kind: FaultKind): () => void {
    const f: FaultWindow = { subjects, kind, fromMs: this.now(), toMs: null };
    this.#faults.push(f);
    return () => {
      f.toMs = this.now();
    };
  }

  /**
   * Whether `x`'s worker could not report to the job's owner at some time in [fromMs, toMs]: a
   * fault on the worker keeping it from reporting, or the bus cut between it and a node that owned
   * the job's partition then (h, see the module header).
   */
  #couldNotReport(x: LedgerEntry, fromMs: number, toMs: number): boolean {
    const during = (f: FaultWindow) =>
      f.fromMs <= toMs && (f.toMs ?? Number.POSITIVE_INFINITY) >= fromMs;
    if (
      this.#faults.some((f) => f.subjects.includes(x.worker) && blocksReports(f.kind) && during(f))
    )
      return true;
    const owners = this.#ownersDuring(this.partitionOfJob(x.tenant, x.job), fromMs, toMs);
    return this.#faults.some(
      (f) =>
        during(f) &&
        cutsOwner(f.kind) &&
        f.subjects.some((s) => owners.has(s)) &&
        (f.kind !== "cut" || f.subjects.includes(x.worker)),
    );
  }

  /** Who held partition `p`'s lease at some time in [fromMs, toMs] (from the leases bucket). */
  #ownersDuring(p: number, fromMs: number, toMs: number): Set<string> {
    const out = new Set<string>();
    const h = this.#owners.get(p) ?? [];
    for (let i = 0; i < h.length; i++) {
      const until = h[i + 1]?.atMs ?? Number.POSITIVE_INFINITY;
      if (h[i]!.atMs <= toMs && until >= fromMs) out.add(h[i]!.owner);
    }
    return out;
  }

  /** Records a violation (the first of each invariant and subject only). */
  fail(invariant: string, subject: string, detail: string): void {
    const k = `${invariant}|${subject}`;
    if (this.#seen.has(k)) return;
    this.#seen.add(k);
    this.trace.add(`!! VIOLATION ${invariant}: ${detail}`);
    this.violations.push({
      invariant,
      atMs: this.now() - this.startMs,
      detail,
      trace: this.trace.last(30),
    });
  }

  /** A worker's event: `completed` means the owner answered its completion report ok. */
  workerEvent(worker: string, e: { type: string; run_id: string; attempt: number }): void {
    const k = `${e.run_id}#${e.attempt}@${worker}`;
    if (e.type === "completed") this.#reported.set(k, this.now());
    if (e.type === "accepted" && !this.#accepted.has(k)) this.#accepted.set(k, this.now());
  }

  /**
   * Whether a fault could have kept a stop (`cancel_on_worker`, sent once) from `x`'s worker at
   * some time in [fromMs, toMs]: one keeping it from reporting (`#couldNotReport`: the worker down,
   * frozen or off the bus, or the bus cut between it and the job's owner), or a lossy bus.
   */
  stopCouldBeLost(x: LedgerEntry, fromMs: number, toMs: number): boolean {
    return (
      this.#couldNotReport(x, fromMs, toMs) ||
      this.#faults.some(
        (f) =>
          f.kind === "lossy_bus" &&
          f.fromMs <= toMs &&
          (f.toMs ?? Number.POSITIVE_INFINITY) >= fromMs,
      )
    );
  }

  watchLedger(ledger: Ledger): void {
    ledger.onStart = (x, active) => {
      this.trace.add(`start ${x.runId} attempt ${x.attempt} fence ${x.fence} on ${x.worker}`);
      this.#onStart(x, active);
    };
    ledger.onEnd = (x) => {
      this.trace.add(
        `end ${x.runId} attempt ${x.attempt} fence ${x.fence} on ${x.worker}: ${x.outcome}`,
      );
      if (x.outcome === "exit 0")
        this.#succeeded.set(x.runId, [...(this.#succeeded.get(x.runId) ?? []), x]);
    };
  }

  #onStart(x: LedgerEntry, active: ReadonlySet<LedgerEntry>): void {
    const k = `${x.runId}|${x.fence}`;
    const other = this.#workersOfAttempt.get(k);
    if (other !== undefined && other !== x.worker) {
      this.fail(
        "attempt_on_two_workers",
        k,
        `run ${x.runId} fence ${x.fence} executed on ${other} and ${x.worker}`,
      );
    }
    this.#workersOfAttempt.set(k, x.worker);
    const overlap = [...active].find((y) => y !== x && y.runId === x.runId);
    if (overlap) {
      this.fail(
        "run_overlap",
        x.runId,
        `run ${x.runId}: attempt ${x.attempt} (fence ${x.fence}) on ${x.worker} started while attempt ${overlap.attempt} (fence ${overlap.fence}) on ${overlap.worker} still ran (since ${fmt(overlap.startMs - this.startMs)})`,
      );
    }
    const jobId = jobIdOfRun(x.runId);
    // Runs started by hand ignore overlap (README): only scheduled runs are judged.
    if (jobId !== null && this.skipJobs.has(jobId) && !isManual(x.runId)) {
      const other = [...active].find(
        (y) =>
          y !== x && y.runId !== x.runId && jobIdOfRun(y.runId) === jobId && !isManual(y.runId),
      );
      if (other)
        this.fail(
          "skip_overlap",
          x.runId,
          `job ${jobId} (overlap skip): run ${x.runId} started while run ${other.runId} still ran (since ${fmt(other.startMs - this.startMs)})`,
        );
    }
    this.#reexecuted(x);
    const cap = this.caps.get(x.tenant);
    const n = [...active].filter((y) => y.tenant === x.tenant).length;
    if (cap !== undefined && n > cap) {
      this.fail(
        "tenant_cap",
        `${x.tenant}|${x.runId}`,
        `tenant ${x.tenant} has ${n} executions at once (cap ${cap}): ${[...active]
          .filter((y) => y.tenant === x.tenant)
          .map(label)
          .join(", ")}`,
      );
    }
    // The worker carries the owner's clock from the offer, which may come long before the start
    // (a worker whose clock lags the owner's waits for its own): the skew counts from there.
    const ahead = this.schedulersAheadMs(
      this.#accepted.get(`${x.runId}#${x.attempt}@${x.worker}`) ?? this.now(),
    );
    const early = x.scheduledForMs - x.startMs - START_TOLERANCE_MS - ahead;
    if (!isManual(x.runId) && early > 0) {
      this.fail(
        "started_early",
        x.runId,
        `run ${x.runId} (attempt ${x.attempt}, fence ${x.fence}) started on ${x.worker} at ${fmt(x.startMs - this.startMs)}, ${x.scheduledForMs - x.startMs} ms before its scheduled_for ${new Date(x.scheduledForMs).toISOString()} (tolerance ${START_TOLERANCE_MS} ms, schedulers' clocks ahead by up to ${ahead} ms since its offer)`,
      );
    }
  }

  /** h: every earlier success, not only the first (one excused must not hide a later one). */
  #reexecuted(x: LedgerEntry): void {
    for (const ok of this.#succeeded.get(x.runId) ?? []) {
      const reportedAt = this.#reported.get(`${ok.runId}#${ok.attempt}@${ok.worker}`);
      const excused =
        reportedAt === undefined && this.#couldNotReport(ok, ok.endMs ?? ok.startMs, x.startMs);
      if (excused) {
        this.atLeastOnce.push(`${x.runId}#${x.attempt}`);
        this.trace.add(
          `at-least-once: ${x.runId} attempt ${x.attempt} after attempt ${ok.attempt} exited 0 on ${ok.worker}, which could not report it to the job's owner`,
        );
        continue;
      }
      const why =
        reportedAt !== undefined
          ? `whose report its owner had answered ok at ${fmt(reportedAt - this.startMs)}`
          : `with no fault keeping ${ok.worker} from reporting to the job's owner since`;
      this.fail(
        "run_reexecuted",
        x.runId,
        `run ${x.runId}: attempt ${x.attempt} (fence ${x.fence}) on ${x.worker} started after attempt ${ok.attempt} (fence ${ok.fence}) on ${ok.worker} exited 0 at ${fmt((ok.endMs ?? 0) - this.startMs)}, ${why}`,
      );
      return;
    }
  }

  /** Watches the shared (fault-free) store: every lease and actor write as it lands. */
  async watchStore(shared: Buckets): Promise<void> {
    await shared.leases.watch("p.*", (c) => {
      if (!c.value) return;
      const v = decode<LeaseValue>(c.value);
      const p = Number(c.key.slice(2));
      const epoch = v.epoch === 0 ? c.revision : v.epoch;
      const h = this.#owners.get(p) ?? [];
      if (h[h.length - 1]?.owner !== v.owner)
        this.#owners.set(p, [...h, { atMs: this.now(), owner: v.owner }]);
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
        this.fail(
          "stale_epoch_key",
          c.key,
          `${c.key} written by ${v.w} under epoch ${v.e} after epoch ${maxKey} had written it (revision ${c.revision})`,
        );
      }
      this.#maxEpochOfKey.set(c.key, Math.max(maxKey, v.e));
      const maxP = this.#maxEpochOfPartition.get(p) ?? 0;
      if (v.e < maxP) this.staleLandedUnfenced++;
    });
  }

  /** End of the simulation: the record checks (record-check.ts) on the shared store's records. */
  async final(
    shared: Buckets,
    ledger: Ledger,
    o: Omit<RecordCheckInput, "states" | "records" | "ledger" | "acceptedAt" | "stopCouldBeLost">,
  ): Promise<void> {
    const states = new Map<string, JobState | undefined>();
    const records = new Map<string, RunView[]>();
    for (const j of o.jobs) {
      const s = await shared.actors.list(`job.*.${j.tenant}.${j.jobId}`);
      states.set(j.jobId, s[0] ? decode<{ s: JobState }>(s[0].value).s : undefined);
      records.set(
        j.jobId,
        (await shared.runs.list(`*.${j.tenant}.${j.jobId}.*`)).map((e) => decode<RunView>(e.value)),
      );
    }
    const out = checkRecords(
      {
        ...o,
        states,
        records,
        ledger: ledger.all,
        acceptedAt: (worker, runId, attempt) => this.#accepted.get(`${runId}#${attempt}@${worker}`),
        stopCouldBeLost: (x, fromMs, toMs) => this.stopCouldBeLost(x, fromMs, toMs),
      },
      (inv, subject, detail) => this.fail(inv, subject, detail),
    );
    this.unstartedCap += out.unstartedCap;
    this.lostStops.push(...out.lostStops);
    for (const id of out.lostStops)
      this.trace.add(`lost stop: ${id} ended as its execution did after a fault lost its stop`);
  }
}

function label(x: LedgerEntry): string {
  return `${x.runId}#${x.attempt}/f${x.fence}@${x.worker}`;
}

export type { CommandRecord };

/**
 * Tenants with a backlog that still moves: at least `cap` of their executions started in the last
 * 15 s of the run and they had one running at least 60% of that time (sampled every 250 ms from
 * the ledger). Their queued runs wait behind their cap — max_concurrent, or their fair share of
 * the fleet when that is lower (the caller passes the lower) — they are not stuck. A tenant
 * stalled by leaked grants starts nothing and is not exempted.
 */
export function saturatedTenants(
  ledger: readonly LedgerEntry[],
  caps: ReadonlyMap<string, number>,
  endMs: number,
): Set<string> {
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
