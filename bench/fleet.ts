/**
 * Fleet benchmark (`npm run bench -- fleet [--slots 8] [--workers 1] [--seconds 60] [--warmup-s 15]
 * [--tasks 0.2,2,20] [--no-md]`): how full, and how fairly shared, a fleet is while demand exceeds it — at the
 * settings a user gets (default lease TTL and heartbeat, nothing tuned).
 *
 * - Cluster: one nats-server, one in-process api+scheduler node, `--workers` worker processes with
 *   the noop executor sharing `--slots` slots. Tasks are `["sleep", s]` (the noop executor takes
 *   that long, as a process would): the heavy tenants' jobs take `--tasks` in turn, by default a
 *   mix of 0.2 s, 2 s and 20 s (`--tasks 2`: every heavy task 2 s, the workload of issue-style
 *   "2 s tasks" figures).
 * - Tenants: `heavy-a`, `heavy-b` (weight 1), `heavy-c` (weight 2) and `capped` (weight 1,
 *   max_concurrent a quarter of the slots, at least 2) each with jobs firing every second,
 *   overlap allow — several times the fleet's capacity; `light`: one job every 5 s (0.2 s task).
 *   The heavy tenants' max_concurrent is the fleet's slots: the default (100) would cap each of
 *   them at a quarter of 400 slots, and their weights would decide nothing.
 * - Measured over the window (after the warm-up), from the run records (attempt start..finish,
 *   clipped; records are read 25 s after the window, once every run started in it has ended):
 *   - `utilisation`: slot-time used over all slot-time, idle counted;
 *   - `max_share_error`: over 10 s windows, per tenant, |its slot-seconds − the weighted max-min
 *     allocation of all slots| / all slot-seconds (the light tenant's demand is what it used,
 *     the others' their caps: the heavy tenants' no bound below the slots);
 *   - `cap_exceeded`: attempt starts that took a tenant over its cap;
 *   - `small_tenant_p99_lag_ms`: the light tenant's first attempt start − scheduled_for;
 *   - `slot_idle_ms`: slot turnaround on each worker — a slot freed by an attempt's end, to the
 *     next start on that worker (frees matched to starts in order); `slot_idle_while_due_ms` the
 *     same for the starts whose run was due when the slot freed (the rest: slots a worker kept
 *     for a run due soon, src/worker/slot-ledger.ts);
 *   - `throttled`: runs given status `throttled`; `waiting_at_end`: records still `queued`;
 *   - per tenant, `grants_mean` and `fleet_share_mean`: its grants held (tenant actor) and its
 *     share (fleet actor), sampled every 500 ms through the window.
 * The last line printed is one JSON object. `KAIROS_FLEET_DUMP=<file>` writes the plans, the run
 * records and the window there (to match runs with a worker's lines kept by KAIROS_TEST_NODE_LOGS).
 */
import { performance } from "node:perf_hooks";
import { systemClock } from "../src/lib/clock.ts";
import { systemRandom } from "../src/lib/random.ts";
import { decode } from "../src/cluster/codec.ts";
import { openBuckets } from "../src/cluster/buckets.ts";
import { makeNodeConfig } from "../src/cluster/config.ts";
import { NatsJobsService } from "../src/service/nats-service.ts";
import type { JobSpec, RunView } from "../src/protocol/model.ts";
import { KvTenantDirectory } from "../src/tenants/index.ts";
import { startKairos } from "../src/server/start.ts";
import { startNats } from "../test/support/nats.ts";
import { RUN_LINES, spawnNode, type NodeProc } from "../test/support/nodes.ts";
import { appendSection, machine } from "./report.ts";
import { waterFill } from "./water-fill.ts";
import { TENANT_ACTOR } from "../src/protocol/ids.ts";
import { FLEET_ACTOR, FLEET_ID, type FleetStatus } from "../src/slots/fleet-actor.ts";

const PARTITIONS = 32;
/** Heavy task lengths in seconds by default, one per job in turn. */
const DEFAULT_TASKS = "0.2,2,20";
const SHARE_WINDOW_MS = 10_000;

function arg(args: string[], name: string, dflt: number): number {
  const i = args.indexOf(`--${name}`);
  const v = i >= 0 ? Number(args[i + 1]) : dflt;
  if (!Number.isFinite(v) || v <= 0) throw new Error(`--${name} must be a number > 0`);
  return v;
}
/** `--tasks`: task lengths in seconds, comma-separated, each in (0, 60]. */
export function taskSleeps(args: readonly string[]): string[] {
  const i = args.indexOf("--tasks");
  const raw = i >= 0 ? (args[i + 1] ?? "") : DEFAULT_TASKS;
  const xs = raw.split(",").map((x) => x.trim());
  for (const x of xs) {
    const v = Number(x);
    if (x === "" || !Number.isFinite(v) || v <= 0 || v > 60)
      throw new Error(
        `--tasks must be task lengths in seconds, comma-separated, each in (0, 60]: got "${raw}"`,
      );
  }
  return xs;
}
const pct = (sorted: number[], p: number) =>
  sorted.length === 0
    ? null
    : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

/**
 * Slot turnaround on one worker: each start after a slot was freed is matched to the earliest
 * unmatched free before it; the gaps, in ms. Starts with no free before them (slots never used
 * yet) are not turnarounds. An interval's third element, its run's due time, marks the gaps
 * whose run was due when the slot freed (`whileDue`): a slot idle while that run waited, not one
 * its worker kept for a run due later (src/worker/slot-ledger.ts `Hold`).
 */
export function turnaroundsOf(
  intervals: readonly (readonly [number, number, number?])[],
): { ms: number; whileDue: boolean }[] {
  const frees = intervals.map(([, f]) => f).sort((a, b) => a - b);
  const starts = intervals
    .map(([s, , due]) => [s, due ?? -Infinity] as const)
    .sort((a, b) => a[0] - b[0]);
  const out: { ms: number; whileDue: boolean }[] = [];
  let fi = 0;
  for (const [s, due] of starts) {
    if (fi < frees.length && frees[fi]! <= s) {
      const free = frees[fi++]!;
      out.push({ ms: s - free, whileDue: due <= free });
    }
  }
  return out;
}

export const turnarounds = (intervals: readonly (readonly [number, number, number?])[]): number[] =>
  turnaroundsOf(intervals).map((t) => t.ms);

interface TenantPlan {
  name: string;
  weight: number;
  cap: number | null;
  jobs: number;
  cron: string;
  sleeps: readonly string[];
  id?: string;
}

export async function run(args: string[]): Promise<void> {
  const slots = Math.round(arg(args, "slots", 8));
  const workers = Math.round(arg(args, "workers", 1));
  const seconds = arg(args, "seconds", 60);
  const warmupS = arg(args, "warmup-s", 15);
  const sleeps = taskSleeps(args);
  const meanS = sleeps.reduce((n, x) => n + Number(x), 0) / sleeps.length;
  if (slots % workers !== 0)
    throw new Error(`--slots (${slots}) must divide evenly among --workers (${workers})`);
  process.env["KAIROS_LOG_LEVEL"] ??= "error";
  // Each heavy job asks for ~meanS slots (one run a second of meanS on average): together
  // about four times the fleet.
  const heavyJobs = Math.max(6, Math.ceil(slots / meanS) + 1);
  const capOf = Math.max(2, Math.floor(slots / 4));
  const heavy = (name: string, weight: number): TenantPlan => ({
    name,
    weight,
    cap: slots,
    jobs: heavyJobs,
    cron: "* * * * * *",
    sleeps,
  });
  const plans: TenantPlan[] = [
    heavy("heavy-a", 1),
    heavy("heavy-b", 1),
    heavy("heavy-c", 2),
    { name: "capped", weight: 1, cap: capOf, jobs: heavyJobs, cron: "* * * * * *", sleeps },
    { name: "light", weight: 1, cap: null, jobs: 1, cron: "*/5 * * * * *", sleeps: ["0.2"] },
  ];
  const nats = await startNats();
  const adminNc = await nats.connect("fleet-admin");
  const tenants = new KvTenantDirectory(
    (await openBuckets(adminNc, { clusterName: "kairos", replicas: 1 })).tenants,
    { clock: systemClock },
  );
  const proc = await startKairos(
    makeNodeConfig({
      natsUrl: nats.url,
      natsAuth: { credsFile: nats.credsFor(["api", "scheduler"]) },
      nodeId: "fleet",
      roles: ["api", "scheduler"],
      partitions: PARTITIONS,
    }),
    { executor: "noop", workerSlots: 0, apiHost: "127.0.0.1", apiPort: 0 },
  );
  const procs: NodeProc[] = [];
  let summary: Record<string, unknown> | undefined;
  try {
    for (let i = 0; i < workers; i++) {
      procs.push(
        spawnNode({
          natsUrl: nats.url,
          creds: nats.credsFor(["worker"]),
          nodeId: `fleet-w${i + 1}`,
          roles: "worker",
          partitions: PARTITIONS,
          extraArgs: ["--executor", "noop", "--slots", String(slots / workers)],
          ignoreLines: RUN_LINES,
        }),
      );
    }
    await Promise.all(
      procs.map((w) => w.waitFor((e) => e.type === "node_started", 30_000, "worker started")),
    );
    while (proc.node.heldPartitions().length !== proc.node.partitions)
      await new Promise((r) => setTimeout(r, 50));
    for (const p of plans) {
      const { tenant } = await tenants.createTenant(p.name);
      await tenants.setQuota(tenant.tenant_id, {
        weight: p.weight,
        ...(p.cap === null ? {} : { max_concurrent_runs: p.cap }),
        max_jobs: 10_000,
      });
      p.id = tenant.tenant_id;
    }
    const svc = new NatsJobsService(
      proc.node.router,
      proc.node.buckets,
      proc.node.partitions,
      systemRandom,
    );
    const t0 = performance.now();
    const base: Omit<JobSpec, "schedule" | "task"> = {
      name: null,
      retry: { max_attempts: 1, backoff: "exponential", base_s: 10, max_s: 3600 },
      overlap: "allow",
      misfire: { policy: "run_once", starting_deadline_s: null },
      flex_window_s: 0,
      enabled: true,
    };
    for (const p of plans) {
      for (let j = 0; j < p.jobs; j++) {
        const sleep = p.sleeps[j % p.sleeps.length]!;
        await svc.createJob(p.id!, {
          ...base,
          schedule: { cron: p.cron, time_zone: "UTC" },
          task: { image: "noop", args: ["sleep", sleep], env: {}, timeout_s: 120 },
        });
      }
    }
    const windowStart = systemClock.now() + warmupS * 1000;
    const windowEnd = windowStart + seconds * 1000;
    console.log(
      `set-up ${((performance.now() - t0) / 1000).toFixed(1)} s: ${plans.reduce((n, p) => n + p.jobs, 0)} jobs; warm-up ${warmupS} s, then measuring for ${seconds} s`,
    );
    // Sampled through the window every 500 ms: each tenant's grants held (its tenant actor) and
    // share (the fleet actor) — where a share error comes from: the share, the grants, or the
    // grants' runs not executing (waiting for a worker's place or slot).
    const samples = new Map(
      plans.map((p) => [p.name, { grants: [] as number[], share: [] as number[] }]),
    );
    while (systemClock.now() < windowEnd) {
      await new Promise((r) =>
        setTimeout(r, Math.min(500, Math.max(0, windowEnd - systemClock.now()))),
      );
      if (systemClock.now() < windowStart || systemClock.now() >= windowEnd) continue;
      const fleet = await proc.node.router
        .request<FleetStatus>(
          { type: FLEET_ACTOR, id: FLEET_ID },
          { kind: "status" },
          { deadlineMs: 2_000 },
        )
        .catch(() => undefined);
      await Promise.all(
        plans.map(async (p) => {
          const t = await proc.node.router
            .request<{ running: number }>(
              { type: TENANT_ACTOR, id: p.id! },
              { kind: "status" },
              { deadlineMs: 2_000 },
            )
            .catch(() => undefined);
          if (t) samples.get(p.name)!.grants.push(t.running);
          const share = fleet?.tenants.find((x) => x.tenant === p.id)?.share;
          if (typeof share === "number") samples.get(p.name)!.share.push(share);
        }),
      );
    }
    // Every run started in the window ends within the longest task (20 s); its record is written
    // at its end. Read once they have had time to settle.
    const nameOf = new Map(plans.map((p) => [p.id!, p.name]));
    await new Promise((r) => setTimeout(r, 25_000));
    const runs = (await proc.node.buckets.runs.list(">"))
      .map((e) => decode<RunView>(e.value))
      .filter((r) => nameOf.has(r.tenant_id) && typeof r.run_id === "string");
    if (process.env["KAIROS_FLEET_DUMP"])
      await import("node:fs/promises").then((fs) =>
        fs.writeFile(
          process.env["KAIROS_FLEET_DUMP"]!,
          JSON.stringify({ plans, runs, windowStart, windowEnd }),
        ),
      );
    summary = measure(plans, runs, {
      slots,
      seconds,
      warmupS,
      windowStart,
      windowEnd,
      workers,
      tasks: sleeps,
    });
    const mean = (xs: number[]) =>
      xs.length === 0 ? null : +(xs.reduce((a, b) => a + b, 0) / xs.length).toFixed(2);
    const shares = summary["shares"] as Record<
      string,
      { grants_mean?: number | null; fleet_share_mean?: number | null }
    >;
    for (const p of plans) {
      const x = samples.get(p.name)!;
      Object.assign(shares[p.name]!, {
        grants_mean: mean(x.grants),
        fleet_share_mean: mean(x.share),
      });
    }
    (summary["lines"] as string[]).push(
      `grants held / fleet share, mean of 500 ms samples: ${plans.map((p) => `${p.name} ${shares[p.name]!.grants_mean ?? "-"} / ${shares[p.name]!.fleet_share_mean ?? "-"}`).join(", ")}`,
    );
    for (const l of summary["lines"] as string[]) console.log(l);
    if (!args.includes("--no-md")) {
      await appendSection(
        "fleet (utilisation and whole-fleet shares at default settings, noop executor)",
        [
          `date: ${new Date().toISOString()}; machine: ${machine()}`,
          `command: \`npm run bench -- fleet --slots ${slots} --workers ${workers} --seconds ${seconds} --warmup-s ${warmupS} --tasks ${sleeps.join(",")}\``,
        ],
        summary["lines"] as string[],
      );
    }
    delete summary["lines"];
  } finally {
    await Promise.all(procs.map((w) => w.stop()));
    await proc.stop();
    await adminNc.close();
    await nats.stop();
  }
  console.log(JSON.stringify(summary));
}

interface Window {
  slots: number;
  seconds: number;
  warmupS: number;
  windowStart: number;
  windowEnd: number;
  workers: number;
  /** The heavy tenants' task lengths (s). */
  tasks: readonly string[];
}

/** The figures, from the run records (pure: exported for its test). */
export function measure(
  plans: readonly TenantPlan[],
  runs: readonly RunView[],
  w: Window,
): Record<string, unknown> {
  const nameOf = new Map(plans.map((p) => [p.id!, p.name]));
  const intervals = new Map<string, [number, number][]>(plans.map((p) => [p.name, []]));
  const byWorker = new Map<string, [number, number, number][]>();
  const statuses: Record<string, number> = {};
  for (const r of runs) {
    const name = nameOf.get(r.tenant_id);
    if (!name) continue;
    statuses[r.status] = (statuses[r.status] ?? 0) + 1;
    for (const a of r.attempts) {
      if (!a.started_at) continue;
      const s = Date.parse(a.started_at);
      const f = a.finished_at ? Date.parse(a.finished_at) : w.windowEnd;
      intervals.get(name)!.push([s, f]);
      if (a.worker)
        (byWorker.get(a.worker) ?? byWorker.set(a.worker, []).get(a.worker)!).push([
          s,
          f,
          Date.parse(r.scheduled_for),
        ]);
    }
  }
  const used = (name: string, from: number, to: number) =>
    intervals
      .get(name)!
      .reduce((n, [s, f]) => n + Math.max(0, Math.min(f, to) - Math.max(s, from)), 0);
  const windowMs = w.windowEnd - w.windowStart;
  const totalUsed = plans.reduce((n, p) => n + used(p.name, w.windowStart, w.windowEnd), 0);
  const utilisation = totalUsed / (w.slots * windowMs);
  // Shares of all slots over 10 s windows.
  let maxErr = 0;
  const perTenant: Record<string, { share: number; reference: number; max_error: number }> = {};
  for (let from = w.windowStart; from + SHARE_WINDOW_MS <= w.windowEnd; from += SHARE_WINDOW_MS) {
    const to = from + SHARE_WINDOW_MS;
    const u = plans.map((p) => used(p.name, from, to) / SHARE_WINDOW_MS); // average slots in use
    const ref = waterFill(
      w.slots,
      plans.map((p, i) => ({
        weight: p.weight,
        demand: p.name === "light" ? u[i]! : (p.cap ?? Number.MAX_SAFE_INTEGER),
      })),
    );
    plans.forEach((p, i) => {
      const err = Math.abs(u[i]! - ref[i]!) / w.slots;
      const t = (perTenant[p.name] ??= { share: 0, reference: 0, max_error: 0 });
      t.max_error = Math.max(t.max_error, +err.toFixed(4));
      maxErr = Math.max(maxErr, err);
    });
  }
  for (const p of plans) {
    const t = (perTenant[p.name] ??= { share: 0, reference: 0, max_error: 0 });
    t.share = +(used(p.name, w.windowStart, w.windowEnd) / (w.slots * windowMs)).toFixed(4);
  }
  const whole = waterFill(
    w.slots,
    plans.map((p) => ({
      weight: p.weight,
      demand:
        p.name === "light"
          ? used(p.name, w.windowStart, w.windowEnd) / windowMs
          : (p.cap ?? Number.MAX_SAFE_INTEGER),
    })),
  );
  plans.forEach((p, i) => (perTenant[p.name]!.reference = +(whole[i]! / w.slots).toFixed(4)));
  // Caps, from the attempt intervals.
  let capExceeded = 0;
  for (const p of plans) {
    if (p.cap === null) continue;
    const events = intervals
      .get(p.name)!
      .flatMap(
        ([s, f]) =>
          [
            [s, 1],
            [f, -1],
          ] as [number, number][],
      )
      .sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    let n = 0;
    for (const [, d] of events) {
      n += d;
      if (d > 0 && n > p.cap) capExceeded++;
    }
  }
  // Slot turnaround inside the window.
  const gaps = [...byWorker.values()].flatMap((xs) =>
    turnaroundsOf(xs.filter(([s]) => s >= w.windowStart && s < w.windowEnd)),
  );
  const idle = gaps.map((g) => g.ms).sort((a, b) => a - b);
  const idleWhileDue = gaps
    .filter((g) => g.whileDue)
    .map((g) => g.ms)
    .sort((a, b) => a - b);
  // The light tenant's lag.
  const light = plans.find((p) => p.name === "light")!;
  const lightRuns = runs.filter(
    (r) =>
      r.tenant_id === light.id &&
      Date.parse(r.scheduled_for) >= w.windowStart &&
      Date.parse(r.scheduled_for) < w.windowEnd,
  );
  const lags = lightRuns
    .filter((r) => r.attempts[0]?.started_at)
    .map((r) => Date.parse(r.attempts[0]!.started_at!) - Date.parse(r.scheduled_for))
    .sort((a, b) => a - b);
  const lines = [
    `fleet: ${w.slots} slots on ${w.workers} worker(s), default lease TTL and heartbeat; heavy tasks of ${w.tasks.join(", ")} s; window ${w.seconds} s after ${w.warmupS} s`,
    `utilisation (all slots, idle counted): ${(utilisation * 100).toFixed(1)}%`,
    ...plans.map(
      (p) =>
        `${p.name.padEnd(8)} weight ${p.weight}, cap ${p.cap ?? "-"}: ${(perTenant[p.name]!.share * 100).toFixed(1)}% of all slots vs ${(perTenant[p.name]!.reference * 100).toFixed(1)}% weighted max-min; worst 10 s window off by ${(perTenant[p.name]!.max_error * 100).toFixed(1)} points`,
    ),
    `max share error (10 s windows, of all slots): ${(maxErr * 100).toFixed(1)} points; cap exceeded: ${capExceeded}`,
    `slot turnaround ms: p50 ${pct(idle, 50)}, p99 ${pct(idle, 99)} (${idle.length} turnarounds); while the next run was due: p50 ${pct(idleWhileDue, 50)}, p99 ${pct(idleWhileDue, 99)} (${idleWhileDue.length}; the others were kept for a run due later)`,
    `light tenant: ${lightRuns.length} runs due in the window, lag ms p50 ${pct(lags, 50)}, p99 ${pct(lags, 99)}; run records by status: ${JSON.stringify(statuses)}`,
  ];
  return {
    lines,
    slots: w.slots,
    workers: w.workers,
    seconds: w.seconds,
    tasks_s: w.tasks.map(Number),
    utilisation: +utilisation.toFixed(3),
    max_share_error: +maxErr.toFixed(4),
    shares: perTenant,
    cap_exceeded: capExceeded,
    small_tenant_p99_lag_ms: pct(lags, 99),
    slot_idle_ms: { p50: pct(idle, 50), p99: pct(idle, 99) },
    slot_idle_while_due_ms: { p50: pct(idleWhileDue, 50), p99: pct(idleWhileDue, 99) },
    throttled: statuses["throttled"] ?? 0,
    waiting_at_end: statuses["queued"] ?? 0,
  };
}
