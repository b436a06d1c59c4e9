/**
 * The ledger chaos engine, shared by test/chaos/ledger.test.ts (short variants, in `npm test`) and
 * test/chaos/ledger-run.ts (`npm run chaos -- --minutes 30 --nats-cluster 3`).
 *
 * Real processes (test/chaos/ledger-cluster.ts): one nats-server or a 3-server NATS cluster with
 * R3 buckets, scheduler nodes (the first also serves the API) and worker nodes, each worker
 * reaching NATS through loopback TCP proxies of its own (so it can be cut off). Jobs fire every
 * few seconds (cron with a seconds field, mixed overlap and misfire policies, a few tenants, one
 * with a low max_concurrent_runs; every third job with the default retry policy, one attempt, as
 * most users leave it). Every execution writes to a ledger the test owns
 * (test/chaos/ledger-readers.ts).
 *
 * A seeded schedule of faults runs meanwhile (kinds: test/chaos/ledger-types.ts; injection:
 * ledger-faults.ts): processes killed, stopped, paused, cut off, NATS servers restarted, killed
 * (meta leader, stream leader, follower) and paused, two faults at once, rolling restarts of every
 * worker (drain, kill -9) and every scheduler under their own ids — and, during faults, the user's
 * commands: pause and resume, a new schedule, delete, run-now (ledger-commands.ts).
 *
 * Then faults stop, the cluster must recover (events and polling with deadlines), the jobs are
 * paused and the invariants (a)–(h) are checked (test/chaos/ledger-checks.ts); the at-least-once
 * re-runs are counted and listed apart.
 *
 * Post-mortems: `KAIROS_TEST_NODE_LOGS=<dir>` keeps every node's output; `KAIROS_CHAOS_DUMP=<file>`
 * writes, for each job whose list lacks or repeats a run, its stored state, runs-index chunks and
 * record keys.
 */
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { kvKeys } from "../../src/cluster/kv.ts";
import { openBuckets, type Buckets } from "../../src/cluster/buckets.ts";
import { decode, encode } from "../../src/cluster/codec.ts";
import { systemClock } from "../../src/lib/clock.ts";
import { KvTenantDirectory } from "../../src/tenants/index.ts";
import type { TenantRecord } from "../../src/tenants/directory.ts";
import { runIdFor } from "../../src/protocol/ids.ts";
import { TERMINAL } from "../../src/protocol/model.ts";
import { TEST_IMAGE } from "../support/docker-image.ts";
import {
  checkAttempts,
  checkOccurrences,
  checkOutcomes,
  checkRunAgain,
  checkTenantCaps,
  closeOpen,
  expectAt,
  type JobRecords,
} from "./ledger-checks.ts";
import { Cluster, delay, pollUntil, type Crash } from "./ledger-cluster.ts";
import {
  ApiError,
  Commander,
  call,
  last,
  type CommandCounts,
  type CommandKind,
} from "./ledger-commands.ts";
import { injectFault, kindsFor } from "./ledger-faults.ts";
import { DockerLedger, PidWatcher, readProcessLedger } from "./ledger-readers.ts";
import {
  FAULT_KINDS,
  type Exec,
  type FaultKind,
  type FaultRecord,
  type JobInfo,
  type Rerun,
  type RunRec,
  type Violation,
} from "./ledger-types.ts";

// ---------------------------------------------------------------------------------------------
// Options and report

export interface ChaosOptions {
  seed: number;
  executor: "process" | "docker";
  /** 1: one nats-server with R1 buckets (default); 3: a 3-server cluster with R3 buckets. */
  natsServers?: 1 | 3;
  schedulers: number;
  workers: number;
  slots: number;
  partitions: number;
  /** Jobs per tenant; the last tenant gets `cap` as max_concurrent_runs. */
  tenants: { name: string; jobs: number; cap?: number }[];
  runLeaseTtlMs: number;
  /**
   * `--keep-runs` for scheduler nodes (run retention per job). Unset: the product default (1,000
   * finished runs per job), which holds a job's whole ledger for runs up to about 50 minutes at
   * the smallest step; a longer run passes more, or its checker would see pruned records as lost.
   */
  keepRuns?: number;
  /** Faults: either a fixed list (run in this order) or a duration with random kinds. */
  faults: { list: FaultKind[] } | { durationMs: number; kinds: readonly FaultKind[] };
  /** Time between the starts of two faults (a fault also waits for the previous recovery). */
  faultEveryMs: number;
  /** The share of faults (0–1) during which a user command is issued (default 0: none). */
  commandShare?: number;
  /** The commands in this order, round and round (default: drawn at random). */
  commandOrder?: readonly CommandKind[];
  /** Task body duration range (seconds, between start and end lines). */
  taskSeconds: [number, number];
  /** Every `every`-th job runs longer than the run lease TTL (heartbeats must keep it alive). */
  longTasks?: { every: number; seconds: number };
  /** Cron second steps to pick from (each divides 60). */
  steps: number[];
  log: (line: string) => void;
}

export interface ChaosReport {
  seed: number;
  executor: string;
  natsServers: number;
  wallMs: number;
  faultPhaseMs: number;
  faults: Record<string, number>;
  faultsTotal: number;
  /** `two_at_once` faults (each counts twice in `faultsTotal`, once per process). */
  pairs: number;
  recoveryTimeouts: number;
  /** Nodes that exited by themselves (each restarted under its id a second later). */
  nodeCrashes: number;
  /**
   * "Publish/Subscription Violation" lines the NATS servers logged. Late replies are expected under
   * faults (`isLateReply`); any other is a node reaching past its permissions: (h).
   */
  natsPermissionViolations: number;
  natsLateReplies: number;
  commands: CommandCounts;
  jobs: number;
  occurrences: number;
  runs: number;
  runsByStatus: Record<string, number>;
  attempts: number;
  /** Attempt outcomes in the run records (lease_lost shows the faults bit). */
  attemptOutcomes: Record<string, number>;
  executions: number;
  openExecutions: number;
  invariants: {
    a_attempt_twice: number;
    b_run_overlap: number;
    c_missing: number;
    c_duplicate: number;
    c_uncalled: number;
    c_cancelled_by_change: number;
    c_manual_extra: number;
    d_stuck: number;
    e_over_cap: number | null;
    f_run_again: number;
    g_outcome_unexecuted: number;
    /** Permission violations a node caused other than a late reply (see `isLateReply`). */
    h_permission: number;
  };
  /** Executions of a run after one of its executions had ended by itself, excused by a hard fault on its worker or NATS (listed in the report). */
  atLeastOnceReruns: number;
  /** Occurrences no longer called for (paused, rescheduled, deleted) that executed on a worker faulted since the change. */
  cancelledRanUnderFault: number;
  /** Occurrences due just before a change that a fault kept from being fired: no record (allowed, counted). */
  unfiredAtChange: number;
  tenantMaxConcurrent: Record<string, { cap: number | null; maxSeen: number }>;
  violations: number;
  examples: Violation[];
  reruns: Rerun[];
  crashes: Crash[];
  /** The first permission violations the servers logged. */
  natsViolationLines: string[];
}

/**
 * A reply published after its permission lapsed: a node answers a request on the asker's inbox
 * (`_INBOX_<user>.…`, or `_R_.…` for a request that crossed an account import), which it may
 * publish to only once per request received, within two minutes,
 * on the connection that received it (`allow_responses`). A node frozen longer than that, or whose
 * connection was replaced meanwhile (a NATS server killed), answers late and the server refuses it;
 * the asker had timed out and asked again. Anything else refused is a node reaching past its rights.
 */
export function isLateReply(line: string): boolean {
  return /Publish Violation - User "[^"]+"(, Account "[^"]+")?, Subject "(_INBOX_[A-Za-z0-9_-]+|_R_)\./.test(
    line,
  );
}

const OVERLAPS = ["skip", "queue", "allow", "replace"] as const;
const MISFIRES = ["run_once", "run_all", "skip"] as const;
const MAX_ATTEMPTS = 3;
const BACKOFF_S = 1;
/** Every `DEFAULT_RETRY_EVERY`-th job keeps the default retry policy (one attempt). */
const DEFAULT_RETRY_EVERY = 3;

/** mulberry32: a seeded PRNG so a failing schedule can be replayed with its seed. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const pick = <T>(rng: () => number, xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)]!;
const between = (rng: () => number, lo: number, hi: number) => lo + rng() * (hi - lo);

// ---------------------------------------------------------------------------------------------
// Jobs

function taskScript(): string {
  // The trap is armed before the start line, so a TERM never leaves a start without a close.
  return [
    'line() { echo "$1 $KAIROS_RUN_ID $KAIROS_ATTEMPT $KAIROS_FENCE $KAIROS_WORKER_ID $(date +%s%3N) $TENANT $$" >> "$CHAOS_LEDGER"; }',
    "trap 'line killed; exit 143' TERM",
    "line start",
    'sleep "$D" & wait $!',
    "line end",
  ].join("\n");
}

function taskFor(
  o: ChaosOptions,
  tenant: string,
  seconds: number,
  ledger: string,
): Record<string, unknown> {
  if (o.executor === "docker") {
    return {
      image: TEST_IMAGE,
      args: ["/bin/sh", "-c", `sleep ${Math.max(1, Math.round(seconds))}`],
      timeout_s: 20,
    };
  }
  return {
    image: "ledger",
    args: ["/bin/sh", "-c", taskScript()],
    timeout_s: 20,
    env: { CHAOS_LEDGER: ledger, D: seconds.toFixed(1), TENANT: tenant },
  };
}

async function allRuns(c: Cluster, key: string, jobId: string): Promise<RunRec[]> {
  const out: RunRec[] = [];
  let cursor: string | null = null;
  do {
    const q: string = `/v1/jobs/${jobId}/runs?limit=200${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`;
    const page: { runs: RunRec[]; next_cursor: string | null } = await call(
      () => c.apiUrl,
      key,
      "GET",
      q,
    );
    out.push(...page.runs);
    cursor = page.next_cursor;
  } while (cursor);
  return out;
}

/** A run by its id, or undefined when the API says 404; `how` says what the lookup saw. */
async function runById(
  c: Cluster,
  key: string,
  runId: string,
): Promise<{ run: RunRec | undefined; how: string }> {
  try {
    const r = await call<RunRec>(() => c.apiUrl, key, "GET", `/v1/runs/${runId}`);
    return { run: r, how: `GET ${runId}: ${r.status}` };
  } catch (e) {
    if (e instanceof ApiError && e.status === 404)
      return { run: undefined, how: `GET ${runId}: 404` };
    return { run: undefined, how: `GET ${runId}: ${String(e).slice(0, 120)}` };
  }
}

/** Whether a run's status (as the API spells it) is terminal: `TERMINAL` of the run model. */
const isTerminal = (status: string): boolean => (TERMINAL as ReadonlySet<string>).has(status);

/** How many run look-ups the final verification has in flight at once. */
const LOOKUPS_IN_FLIGHT = 8;

/** `fn` over `items` with at most `limit` calls in flight; the results in the items' order. */
async function mapBounded<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<R>,
): Promise<R[]> {
  const out: R[] = new Array<R>(items.length);
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  return out;
}

/**
 * The ids of the run records stored for a job: one key listing of the runs bucket (keys
 * `<partition>.<tenant>.<job>.<run>`, headers only, as complete as a listing of the records).
 */
async function storedRunIds(bk: Buckets, tenantId: string, jobId: string): Promise<Set<string>> {
  const keys = await kvKeys(bk.runs, `*.${tenantId}.${jobId}.*`);
  return new Set(keys.map((k) => k.key.slice(k.key.lastIndexOf(".") + 1)));
}

const stepOf = (t: number, steps: number[]) =>
  steps.filter((s) => (Math.floor(t / 1000) % 60) % s === 0);

// ---------------------------------------------------------------------------------------------
// The run

export async function runLedgerChaos(
  o: ChaosOptions,
  onCluster?: (stop: () => Promise<void>) => void,
): Promise<ChaosReport> {
  const t0 = Date.now();
  const rng = prng(o.seed);
  const natsServers = o.natsServers ?? 1;
  const tag = `L${(o.seed % 100_000).toString(36)}${process.pid.toString(36)}`;
  const c = new Cluster(
    {
      executor: o.executor,
      natsServers,
      schedulers: o.schedulers,
      workers: o.workers,
      slots: o.slots,
      partitions: o.partitions,
      runLeaseTtlMs: o.runLeaseTtlMs,
      log: o.log,
      ...(o.keepRuns !== undefined ? { keepRuns: o.keepRuns } : {}),
    },
    tag,
  );
  onCluster?.(() => c.stop());
  const dockerLedger = o.executor === "docker" ? new DockerLedger() : undefined;
  const faults: FaultRecord[] = [];
  try {
    o.log(`seed ${o.seed}; ledger ${c.ledger}`);
    if (dockerLedger) await dockerLedger.start();
    await c.start();
    o.log(
      `cluster up: ${natsServers} NATS server(s) (R${natsServers} buckets), ${o.schedulers} schedulers, ${o.workers} workers (${o.executor}) in ${Date.now() - t0} ms`,
    );

    // Tenants (through the real tenant directory), one with a low cap set on its record.
    const keys = new Map<string, string>();
    const tenantIds = new Map<string, string>();
    const caps = new Map<string, number>();
    const b = await openBuckets(c.admin, { clusterName: "kairos", replicas: c.replicas });
    const dir = new KvTenantDirectory(b.tenants, { clock: systemClock, authCacheTtlMs: 0 });
    for (const t of o.tenants) {
      const r = await dir.createTenant(`${t.name}-${tag}`.toLowerCase());
      keys.set(t.name, r.apiKey);
      tenantIds.set(t.name, r.tenant.tenant_id);
      if (t.cap !== undefined) {
        const entry = await b.tenants.get(`t.${r.tenant.tenant_id}`);
        const rec = decode<TenantRecord>(entry!.value);
        const w = await b.tenants.update(
          `t.${r.tenant.tenant_id}`,
          encode({ ...rec, max_concurrent_runs: t.cap }),
          entry!.revision,
        );
        if (!w.ok) throw new Error(`could not set the cap of tenant ${t.name}`);
        caps.set(o.executor === "docker" ? r.tenant.tenant_id : t.name, t.cap);
      }
    }
    const keyOf = (tenant: string) => keys.get(tenant)!;

    // Jobs. A create carries an Idempotency-Key: sent again after no answer, it is answered once.
    const jobs: JobInfo[] = [];
    // Its own generator: new jobs in place of deleted ones come at times the fault plan does not fix.
    const jobRng = prng(o.seed ^ 0x10b5);
    let created = 0;
    const createJob = async (tenant: string): Promise<void> => {
      const n = created++;
      const rng = jobRng;
      const step = pick(rng, o.steps);
      const overlap = OVERLAPS[n % OVERLAPS.length]!;
      const misfire = pick(rng, MISFIRES);
      const long = o.longTasks !== undefined && n % o.longTasks.every === o.longTasks.every - 1;
      const secs = long ? o.longTasks!.seconds : between(rng, o.taskSeconds[0], o.taskSeconds[1]);
      const maxAttempts = n % DEFAULT_RETRY_EVERY === DEFAULT_RETRY_EVERY - 1 ? 1 : MAX_ATTEMPTS;
      const sentMs = Date.now();
      const job = await call<{ job_id: string; next_run_at: string }>(
        () => c.apiUrl,
        keyOf(tenant),
        "POST",
        "/v1/jobs",
        {
          name: `${tenant}-${n}`,
          schedule: { cron: `*/${step} * * * * *`, time_zone: "UTC" },
          task: taskFor(o, tenant, secs, c.ledger),
          overlap,
          misfire: { policy: misfire },
          ...(maxAttempts > 1
            ? {
                retry: {
                  max_attempts: maxAttempts,
                  backoff: "fixed",
                  base_s: BACKOFF_S,
                  max_s: BACKOFF_S,
                },
              }
            : {}),
        },
        120_000,
        { "idempotency-key": `ledger-${tag}-${n}` },
      );
      const firstMs = Date.parse(job.next_run_at);
      jobs.push({
        jobId: job.job_id,
        tenant,
        overlap,
        misfire,
        maxAttempts,
        firstMs,
        lastCheckedMs: 0,
        phases: [
          { change: "create", sentMs, ackMs: Date.now(), enabled: true, step, deleted: false },
        ],
        manual: { sent: 0, acked: [] },
      });
    };
    for (const t of o.tenants) for (let i = 0; i < t.jobs; i++) await createJob(t.name);
    o.log(`${jobs.length} jobs created for ${o.tenants.length} tenants`);
    const commander = new Commander({
      jobs,
      apiUrl: () => c.apiUrl,
      keyOf,
      rng: prng(o.seed ^ 0xc0ffee),
      steps: o.steps,
      log: o.log,
      ...(o.commandOrder ? { order: o.commandOrder } : {}),
      replace: async (tenant) => {
        await createJob(tenant);
        o.log(`command: job ${jobs[jobs.length - 1]!.jobId} created in place of a deleted one`);
      },
    });

    const pids = dockerLedger ? undefined : new PidWatcher(c.ledger);
    pids?.start();
    const executions = (): Exec[] =>
      dockerLedger ? [...dockerLedger.execs.values()] : readProcessLedger(c.ledger, pids?.gone);
    const ended = () => executions().filter((e) => e.endMs !== undefined).length;
    const progress = async (n: number, timeoutMs: number): Promise<boolean> => {
      const target = ended() + n;
      return (
        (await pollUntil(() => (ended() >= target ? true : undefined), timeoutMs, 200)) === true
      );
    };
    if (!(await progress(Math.min(10, jobs.length), 60_000)))
      throw new Error("no executions finished within 60 s of creating the jobs");
    o.log(`warm: ${ended()} executions finished`);

    // Faults, a user's command during some of them.
    const faultPhaseStart = Date.now();
    const faultPhaseEnd =
      "durationMs" in o.faults ? faultPhaseStart + o.faults.durationMs : Number.POSITIVE_INFINITY;
    const kinds = kindsFor(natsServers, "kinds" in o.faults ? o.faults.kinds : FAULT_KINDS);
    const cmdRng = prng(o.seed ^ 0xbeef);
    let recoveryTimeouts = 0;
    let pairs = 0;
    for (let i = 0; ; i++) {
      let kind: FaultKind | undefined;
      if ("list" in o.faults) kind = o.faults.list[i];
      else if (Date.now() < faultPhaseEnd) kind = pick(rng, kinds);
      if (kind === undefined) break;
      const atMs = Date.now();
      if (cmdRng() < (o.commandShare ?? 0))
        commander.issueAfter(Math.round(between(cmdRng, 300, 1500)));
      const recs = await injectFault(c, rng, o.runLeaseTtlMs, kind, o.log);
      const recovered = await c.whole(45_000);
      const now = Date.now();
      if (!recovered) recoveryTimeouts++;
      if (recs.length === 2) {
        pairs++;
        recs[0]!.pairedWith = faults.length + 1;
        recs[1]!.pairedWith = faults.length;
      }
      for (const f of recs) {
        f.recoveredMs = recovered ? now : undefined;
        for (const h of f.hits) if (h.untilMs === undefined && recovered) h.untilMs = now;
        faults.push(f);
        o.log(
          `fault ${faults.length} ${f.kind} ${f.target} (${f.detail}): lifted after ${f.liftedMs - f.atMs} ms, ${recovered ? `whole after ${now - f.liftedMs} ms` : `NOT whole within 45 s (${c.lastUnwhole})`}`,
        );
      }
      // Pacing: the next fault starts `faultEveryMs` after this one started.
      const wait = atMs + o.faultEveryMs - Date.now();
      if (wait > 0) await delay(wait);
    }
    const faultPhaseMs = Date.now() - faultPhaseStart;
    await commander.settle(); // resumes still to come, deletes' new jobs
    const live = jobs.filter((j) => !last(j).deleted);
    const deleted = jobs.filter((j) => last(j).deleted);

    // Settle: whole, working, and every job has fired after recovery.
    if (!(await c.whole(60_000)))
      o.log(`WARNING: cluster not whole 60 s after the last fault (${c.lastUnwhole})`);
    const healthyFrom = Date.now();
    const fired = new Map<string, number>();
    const allFired = await pollUntil(
      async () => {
        for (const j of live) {
          if (fired.has(j.jobId)) continue;
          const page = await call<{ runs: RunRec[] }>(
            () => c.apiUrl,
            keyOf(j.tenant),
            "GET",
            `/v1/jobs/${j.jobId}/runs?limit=1`,
          );
          const newest = page.runs[0];
          const due = newest ? Date.parse(newest.scheduled_for) : 0;
          // A run prepared ahead (look-ahead) is not due yet: the final pause below cancels it,
          // so the check stops just before it (every occurrence before it was enumerated).
          if (newest && newest.trigger !== "manual" && due >= healthyFrom + 1000)
            fired.set(j.jobId, due > Date.now() ? due - 1 : due);
        }
        return fired.size === live.length ? true : undefined;
      },
      60_000,
      500,
    );
    if (!allFired) o.log(`WARNING: only ${fired.size}/${live.length} jobs fired after recovery`);
    for (const j of live) {
      // The newest recorded occurrence: everything before it was enumerated by a healthy owner.
      j.lastCheckedMs = fired.get(j.jobId) ?? healthyFrom - 30_000;
    }
    for (const j of deleted) j.lastCheckedMs = last(j).sentMs;
    for (const j of live) {
      j.finalPause = { sentMs: Date.now() };
      await call(() => c.apiUrl, keyOf(j.tenant), "PATCH", `/v1/jobs/${j.jobId}`, {
        enabled: false,
      });
      j.finalPause.ackMs = Date.now();
    }
    const pausedAt = Date.now();
    o.log(`jobs paused; ${ended()} executions finished so far`);

    // (d): every run terminal within lease TTL + retry bound (+ a slot re-ask period and slack).
    const maxTask =
      Math.max(o.taskSeconds[1], o.longTasks?.seconds ?? 0) * 1000 +
      (o.executor === "docker" ? 3000 : 0);
    const boundMs =
      2 * o.runLeaseTtlMs +
      MAX_ATTEMPTS * (BACKOFF_S * 2000 + o.runLeaseTtlMs + maxTask + 1000) +
      10_000 +
      5_000;
    const runsOf = new Map<string, RunRec[]>();
    const allTerminal = await pollUntil(
      async () => {
        for (const j of live) {
          const prev = runsOf.get(j.jobId);
          if (prev && prev.every((r) => isTerminal(r.status))) continue;
          runsOf.set(j.jobId, await allRuns(c, keyOf(j.tenant), j.jobId));
        }
        return [...runsOf.values()].every((rs) => rs.every((r) => isTerminal(r.status)))
          ? true
          : undefined;
      },
      boundMs,
      1000,
    );
    o.log(
      `${allTerminal ? "all runs terminal" : "runs still active"} ${Date.now() - pausedAt} ms after pausing (bound ${boundMs} ms)`,
    );
    // Re-read everything once more for the final picture.
    for (const j of live) runsOf.set(j.jobId, await allRuns(c, keyOf(j.tenant), j.jobId));
    const records = new Map<string, JobRecords>();
    for (const j of live) {
      const rs = runsOf.get(j.jobId) ?? [];
      const bySched = new Map<number, RunRec[]>();
      for (const r of rs)
        if (r.trigger !== "manual")
          bySched.set(Date.parse(r.scheduled_for), [
            ...(bySched.get(Date.parse(r.scheduled_for)) ?? []),
            r,
          ]);
      // An occurrence the listing lacks is looked up by its run id too: a record the listing
      // missed and a record never written are different bugs.
      const direct = new Map<number, string>();
      for (let t = Math.ceil(j.firstMs / 1000) * 1000; t <= j.lastCheckedMs; t += 1000) {
        if (expectAt(j, t).expect === "one" && !bySched.has(t))
          direct.set(t, (await runById(c, keyOf(j.tenant), runIdFor(j.jobId, t))).how);
      }
      const manualIds = new Set(rs.filter((r) => r.trigger === "manual").map((r) => r.run_id));
      for (const id of j.manual.acked)
        if (!manualIds.has(id))
          o.log(`acknowledged manual run ${id} of ${j.jobId} not in its listing`);
      records.set(j.jobId, { bySched, manual: manualIds.size, direct });
    }
    // KAIROS_CHAOS_DUMP=<file>: for each job whose listing lacks a record that exists by id, its
    // state and runs-index chunks as stored (a post-mortem of the runs list).
    if (process.env.KAIROS_CHAOS_DUMP) {
      const out: unknown[] = [];
      const bk = await openBuckets(c.admin, { clusterName: "kairos", replicas: c.replicas });
      for (const j of live) {
        const rec = records.get(j.jobId)!;
        const gaps = [...rec.direct.entries()].filter(([, how]) => !how.endsWith(": 404"));
        const twice = [...rec.bySched.entries()].filter(([, rs]) => rs.length > 1).map(([t]) => t);
        if (gaps.length === 0 && twice.length === 0 && out.length > 0) continue;
        const tid = tenantIds.get(j.tenant) ?? j.tenant;
        const states = [];
        for (const k of await kvKeys(bk.actors, `job.*.${tid}.${j.jobId}`)) {
          const e = await bk.actors.get(k.key);
          states.push({ key: k.key, revision: e?.revision, value: e ? decode(e.value) : null });
        }
        const chunks = [];
        for (const k of await kvKeys(bk.runs, `ix.*.${tid}.${j.jobId}.*`)) {
          const e = await bk.runs.get(k.key);
          chunks.push({ key: k.key, revision: e?.revision, value: e ? decode(e.value) : null });
        }
        const recs = (await kvKeys(bk.runs, `*.${tid}.${j.jobId}.*`)).map((k) => [
          k.key,
          k.revision,
        ]);
        out.push({
          job: j.jobId,
          tenant: tid,
          listed: (runsOf.get(j.jobId) ?? []).map((r) => r.run_id),
          gaps: gaps.map(([t, how]) => [runIdFor(j.jobId, t), how]),
          twice: twice.map((t) => runIdFor(j.jobId, t)),
          relisted: (await allRuns(c, keyOf(j.tenant), j.jobId)).map((r) => r.run_id),
          states,
          chunks,
          recs,
        });
      }
      writeFileSync(process.env.KAIROS_CHAOS_DUMP, JSON.stringify(out, null, 1));
      o.log(`post-mortem of ${out.length} jobs written to ${process.env.KAIROS_CHAOS_DUMP}`);
    }
    // A deleted job is not listed: its runs are looked up by id (kept a minute past the delete,
    // and not before a day since the create). Occurrences on a grid of any of its phases, and its
    // manual runs. One key listing of the runs bucket says which of them have a record: those are
    // read through the API (a few at a time), the rest are absent (a GET would answer 404) —
    // instead of one GET per second of every deleted job's life.
    const deletedRuns: RunRec[] = [];
    const bkRuns = await openBuckets(c.admin, { clusterName: "kairos", replicas: c.replicas });
    const lookUpStart = Date.now();
    let occurrences = 0;
    for (const j of deleted) {
      const stored = await storedRunIds(bkRuns, tenantIds.get(j.tenant) ?? j.tenant, j.jobId);
      const lookUp = (id: string) =>
        stored.has(id)
          ? runById(c, keyOf(j.tenant), id)
          : Promise.resolve({
              run: undefined,
              how: `${id}: none of the job's ${stored.size} records in the runs bucket`,
            });
      const steps = [...new Set(j.phases.map((p) => p.step))];
      const grid: number[] = [];
      for (let t = Math.ceil(j.firstMs / 1000) * 1000; t <= j.lastCheckedMs; t += 1000)
        if (stepOf(t, steps).length > 0) grid.push(t);
      occurrences += grid.length + j.manual.acked.length;
      const found = await mapBounded(grid, LOOKUPS_IN_FLIGHT, (t) => lookUp(runIdFor(j.jobId, t)));
      const bySched = new Map<number, RunRec[]>();
      const direct = new Map<number, string>();
      grid.forEach((t, i) => {
        const { run, how } = found[i]!;
        if (run) {
          bySched.set(t, [run]);
          deletedRuns.push(run);
        } else direct.set(t, how);
      });
      const manual = await mapBounded(j.manual.acked, LOOKUPS_IN_FLIGHT, lookUp);
      j.manual.acked.forEach((id, i) => {
        const { run, how } = manual[i]!;
        if (run) deletedRuns.push(run);
        else o.log(`acknowledged manual run ${id} of deleted job ${j.jobId}: ${how}`);
      });
      records.set(j.jobId, { bySched, manual: undefined, direct });
    }
    o.log(
      `deleted jobs: ${deleted.length}, ${occurrences} runs looked up, ${deletedRuns.length} records read, in ${Date.now() - lookUpStart} ms`,
    );
    const runs = [...[...runsOf.values()].flat(), ...deletedRuns];
    const stuck = runs.filter((r) => !isTerminal(r.status));
    // A Kairos node should cause none (each runs with its own identity's least privilege).
    const permissionViolations = c.nats.violations();

    // Stop the cluster (remaining tasks are killed: their TERM trap / die event closes them).
    await c.stop();
    if (dockerLedger) {
      await pollUntil(() => (dockerLedger.open() === 0 ? true : undefined), 15_000, 200);
      dockerLedger.stop();
    }
    pids?.stop();
    const endMs = Date.now();
    const execs = executions();
    const openExecutions = closeOpen(execs, c.killTimes, endMs);

    // Post-mortem: a run the final pause cancelled "before it started" although an execution of it
    // had started well before the pause (the owner never heard it). (c) flags it when no change
    // of the user's explains the record; this lists every such run, whatever its job's phases.
    for (const j of live) {
      const sent = j.finalPause?.sentMs;
      if (sent === undefined) continue;
      for (const r of runsOf.get(j.jobId) ?? []) {
        if (r.status !== "cancelled" || r.reason !== "job paused before it started") continue;
        const xs = execs.filter((x) => x.run === r.run_id && x.startMs < sent - o.runLeaseTtlMs);
        if (xs.length === 0) continue;
        o.log(
          `cancelled by the final pause (sent ${new Date(sent).toISOString()}) after executing: ${r.run_id} (${r.scheduled_for}); executions ${JSON.stringify(xs.map((x) => [x.attempt, x.fence, x.worker, new Date(x.startMs).toISOString(), x.endMs === undefined ? null : new Date(x.endMs).toISOString(), x.how]))}; attempts ${JSON.stringify(r.attempts.map((x) => [x.worker, x.started_at, x.outcome]))}`,
        );
      }
    }
    // Invariants.
    const violations: Violation[] = [];
    const { a, b: overlap } = checkAttempts(execs, faults, o.runLeaseTtlMs);
    violations.push(...a, ...overlap);
    const occ = checkOccurrences(jobs, records, execs, faults, o.runLeaseTtlMs);
    violations.push(...occ.violations);
    for (const r of stuck) {
      violations.push({
        invariant: "d",
        text: `run ${r.run_id} (job ${r.job_id}, ${r.scheduled_for}) still ${r.status} ${boundMs} ms after pausing; attempts ${JSON.stringify(r.attempts.map((x) => [x.worker, x.outcome]))}`,
        faults: [],
      });
    }
    const { max, e } = checkTenantCaps(execs, caps, faults, o.runLeaseTtlMs);
    violations.push(...e);
    const { f, reruns } = checkRunAgain(execs, faults, o.runLeaseTtlMs);
    violations.push(...f);
    // A task dies with its worker: at a kill -9, or by its watchdog when the worker is frozen.
    const taskKills = new Map(c.killTimes);
    for (const [w, ts] of c.freezeTimes) taskKills.set(w, [...(taskKills.get(w) ?? []), ...ts]);
    const g = checkOutcomes(runs, execs, taskKills, faults, o.runLeaseTtlMs);
    violations.push(...g);
    const lateReplies = permissionViolations.filter(isLateReply);
    const h = permissionViolations
      .filter((l) => !isLateReply(l))
      .map((l): Violation => ({ invariant: "h", text: `NATS refused a node: ${l}`, faults: [] }));
    violations.push(...h);

    const runsByStatus: Record<string, number> = {};
    for (const r of runs) runsByStatus[r.status] = (runsByStatus[r.status] ?? 0) + 1;
    const attemptOutcomes: Record<string, number> = {};
    for (const r of runs)
      for (const x of r.attempts)
        attemptOutcomes[x.outcome ?? "none"] = (attemptOutcomes[x.outcome ?? "none"] ?? 0) + 1;
    const faultCounts: Record<string, number> = {};
    for (const x of faults) faultCounts[x.kind] = (faultCounts[x.kind] ?? 0) + 1;
    const tenantMaxConcurrent: ChaosReport["tenantMaxConcurrent"] = {};
    for (const t of o.tenants) {
      const k = o.executor === "docker" ? tenantIds.get(t.name)! : t.name;
      tenantMaxConcurrent[t.name] = { cap: t.cap ?? null, maxSeen: max.get(k) ?? 0 };
    }
    const hasCap = o.tenants.some((t) => t.cap !== undefined);
    return {
      seed: o.seed,
      executor: o.executor,
      natsServers,
      wallMs: Date.now() - t0,
      faultPhaseMs,
      faults: faultCounts,
      faultsTotal: faults.length,
      pairs,
      recoveryTimeouts,
      nodeCrashes: c.crashes.length,
      natsPermissionViolations: permissionViolations.length,
      natsLateReplies: lateReplies.length,
      commands: commander.counts,
      jobs: jobs.length,
      occurrences: occ.occurrences,
      runs: runs.length,
      runsByStatus,
      attempts: runs.reduce((n, r) => n + r.attempts.length, 0),
      attemptOutcomes,
      executions: execs.length,
      openExecutions,
      invariants: {
        a_attempt_twice: a.length,
        b_run_overlap: overlap.length,
        c_missing: occ.missing,
        c_duplicate: occ.duplicate,
        c_uncalled: occ.uncalled,
        c_cancelled_by_change: occ.cancelledByChange,
        c_manual_extra: occ.manualExtra,
        d_stuck: stuck.length,
        e_over_cap: hasCap ? e.length : null,
        f_run_again: f.length,
        g_outcome_unexecuted: g.length,
        h_permission: h.length,
      },
      atLeastOnceReruns: reruns.length,
      cancelledRanUnderFault: occ.cancelledRanUnderFault,
      unfiredAtChange: occ.unfiredAtChange,
      tenantMaxConcurrent,
      violations: violations.length,
      examples: violations,
      reruns,
      crashes: [...c.crashes],
      natsViolationLines: [
        ...permissionViolations.filter((l) => !isLateReply(l)),
        ...lateReplies,
      ].slice(0, 10),
    };
  } finally {
    dockerLedger?.stop();
    await c.stop();
    if (process.env["KAIROS_CHAOS_KEEP"] === "1") o.log(`kept ${c.dir}`);
    else c.removeDir();
  }
}

/** A human report; the last line is one JSON object with the figures. */
export function formatReport(r: ChaosReport, maxExamples = 10): string {
  const lines: string[] = [];
  lines.push(
    `== ledger chaos (${r.executor}, ${r.natsServers === 3 ? "3-server NATS cluster, R3 buckets" : "one NATS server, R1 buckets"}), seed ${r.seed}, ${(r.wallMs / 1000).toFixed(0)} s wall, fault phase ${(r.faultPhaseMs / 1000).toFixed(0)} s`,
  );
  lines.push(
    `faults: ${r.faultsTotal} (${Object.entries(r.faults)
      .map(([k, n]) => `${k} ${n}`)
      .join(", ")}); two at once ${r.pairs} times; recovery timeouts ${r.recoveryTimeouts}`,
  );
  lines.push(
    `NATS permission violations logged: ${r.natsPermissionViolations}, of which late replies ${r.natsLateReplies}${r.natsViolationLines.map((l) => `\n    ${l}`).join("")}`,
  );
  lines.push(
    `nodes that exited by themselves (restarted): ${r.nodeCrashes}${r.crashes.map((x) => `\n    ${x.id} at ${new Date(x.atMs).toISOString()}, code ${x.code}: ${JSON.stringify(x.stderr.slice(-1500))}`).join("")}`,
  );
  const cmd = r.commands;
  lines.push(
    `commands during faults: pause ${cmd.pause}, resume ${cmd.resume}, new schedule ${cmd.patch}, delete ${cmd.delete}, run-now ${cmd.run_now} (+${cmd.run_now_unanswered} unanswered); never acknowledged ${cmd.unacknowledged}`,
  );
  lines.push(
    `jobs ${r.jobs}, occurrences checked ${r.occurrences}, run records ${r.runs} (${Object.entries(
      r.runsByStatus,
    )
      .map(([k, n]) => `${k} ${n}`)
      .join(", ")})`,
  );
  lines.push(
    `attempts (API) ${r.attempts} (${Object.entries(r.attemptOutcomes)
      .map(([k, n]) => `${k} ${n}`)
      .join(
        ", ",
      )}), executions (ledger) ${r.executions}, executions never closed ${r.openExecutions}`,
  );
  const inv = r.invariants;
  lines.push(`(a) attempt executed twice:        ${inv.a_attempt_twice}`);
  lines.push(`(b) executions of a run overlap:   ${inv.b_run_overlap}`);
  lines.push(
    `(c) occurrence without a record:   ${inv.c_missing}; with several records: ${inv.c_duplicate}; not called for yet recorded or run: ${inv.c_uncalled}; cancelled by an earlier change: ${inv.c_cancelled_by_change}; manual runs beyond requests: ${inv.c_manual_extra}`,
  );
  lines.push(`(d) run stuck non-terminal:        ${inv.d_stuck}`);
  lines.push(`(e) tenant above its cap:          ${inv.e_over_cap ?? "not checked (no cap)"}`);
  lines.push(`(f) run again after it ended:      ${inv.f_run_again}`);
  lines.push(`(g) outcome with no execution:     ${inv.g_outcome_unexecuted}`);
  lines.push(`(h) NATS refused a node (not a late reply): ${inv.h_permission}`);
  lines.push(
    `at-least-once re-runs (a run executed again after an execution that ended by itself, its worker or NATS hard-faulted between): ${r.atLeastOnceReruns}`,
  );
  lines.push(
    `cancelled occurrences executed by a worker faulted since the change: ${r.cancelledRanUnderFault}`,
    `occurrences due just before a change, not fired for a fault, with no record: ${r.unfiredAtChange}`,
  );
  for (const [t, m] of Object.entries(r.tenantMaxConcurrent))
    lines.push(
      `    tenant ${t}: cap ${m.cap ?? "default"}, most runs executing at once ${m.maxSeen}`,
    );
  for (const v of r.examples.slice(0, maxExamples))
    lines.push(
      `  [${v.invariant}] ${v.text}${v.faults.length ? `\n        near: ${v.faults.join("; ")}` : ""}`,
    );
  if (r.examples.length > maxExamples) lines.push(`  … ${r.examples.length - maxExamples} more`);
  for (const x of r.reruns.slice(0, maxExamples))
    lines.push(
      `  [re-run] ${x.text}${x.faults.length ? `\n        near: ${x.faults.join("; ")}` : ""}`,
    );
  if (r.reruns.length > maxExamples)
    lines.push(`  … ${r.reruns.length - maxExamples} more re-runs`);
  const {
    examples: _examples,
    reruns: _reruns,
    crashes: _crashes,
    natsViolationLines: _lines,
    ...figures
  } = r;
  lines.push(JSON.stringify(figures));
  return lines.join("\n");
}

/** Sanity helper for the runner: does `date +%s%3N` give milliseconds here? */
export function ledgerClockWorks(): boolean {
  const r = spawnSync("/bin/sh", ["-c", "date +%s%3N"], { encoding: "utf8" });
  return /^\d{13}$/.test(r.stdout.trim());
}
