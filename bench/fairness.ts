/**
 * Fairness benchmark (`npm run bench -- fairness [--seconds 60] [--slots 40] [--duration-ms 1000]
 * [--backlog 100000] [--warmup-s 5] [--no-md]`): weighted max-min shares of the fleet's slots
 * under more demand than capacity, and the lag of a small tenant meanwhile.
 *
 * - Cluster: one nats-server, one in-process scheduler node (api + scheduler identities), one
 *   worker process with the noop executor, `--slots` slots, each run occupying its slot for
 *   `--duration-ms`. Default lease TTL and heartbeat (the settings a user gets); a scheduler
 *   offers a worker no more runs than it advertised free at its last heartbeat.
 * - Tenants (made over an admin connection): `large-a` (weight 1) with `--backlog` runs waiting,
 *   `large-b` (weight 1) and `large-c` (weight 2, capped at 40% of the slots: `max_concurrent`)
 *   with enough runs waiting to outlast the window, and `small` (weight 1): two cron jobs every
 *   2 s (overlap skip) started with the window. The backlogs are manual runs ("run now") of
 *   jobs of 10 runs each, overlap allow.
 * - Measured over the window (after `--warmup-s`, while the shares settle and the grants held
 *   from set-up drain), from the run records: each tenant's average slots in use (attempt
 *   start..finish clipped to the window). The reference is the continuous weighted max-min
 *   allocation of the slots for the demands the fleet actor saw: the small tenant's (the mean of
 *   its reported demand — its peak over 3 s — sampled from the fleet actor), the capped
 *   tenant's cap, the others unbounded. A large tenant's `measured` share is its part of the
 *   slots the large tenants used, its `expected` share its part of what the reference gives the
 *   large tenants (so slots idle between heartbeats, and the small tenant's unused reservation,
 *   do not count as anyone's error); `max_share_error` is the largest relative error among them.
 *   The small tenant's entry compares its average slots in use with its reservation (fractions
 *   of all slots); its service is judged by its lag. `cap_exceeded`: attempt starts that took a tenant over its
 *   cap (from the run records) plus samples of a tenant actor holding more grants than its cap.
 *   `small_tenant_p99_lag_ms`: first attempt start − scheduled_for of the small tenant's runs
 *   due in the window (a run not started by the end counts with its wait so far).
 * The last line printed is one JSON object.
 */
import { performance } from "node:perf_hooks";
import { systemClock } from "../src/lib/clock.ts";
import { systemRandom } from "../src/lib/random.ts";
import { decode } from "../src/cluster/codec.ts";
import { openBuckets } from "../src/cluster/buckets.ts";
import { makeNodeConfig } from "../src/cluster/config.ts";
import { NatsJobsService } from "../src/service/nats-service.ts";
import type { JobSpec, RunView } from "../src/protocol/model.ts";
import { FLEET_ACTOR, FLEET_ID, type FleetStatus } from "../src/slots/fleet-actor.ts";
import { maxMinShares } from "../src/slots/fair-share.ts";
import { TENANT_ACTOR } from "../src/protocol/ids.ts";
import { KvTenantDirectory } from "../src/tenants/index.ts";
import { startKairos } from "../src/server/start.ts";
import { startNats } from "../test/support/nats.ts";
import { RUN_LINES, spawnNode } from "../test/support/nodes.ts";
import { appendSection, machine } from "./report.ts";
import { isKairosError } from "../src/lib/errors.ts";
import { waterFill } from "./water-fill.ts";

/**
 * A set-up request, tried again on a retryable failure (no owner answered in time, overloaded):
 * creating a 100,000-run backlog saturates the node, and one such error ended the whole run. An
 * unknown outcome retried may add one run to a backlog of 100,000 (no effect on the shares).
 */
async function setUpStep<T>(step: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await step();
    } catch (e) {
      const retryable =
        isKairosError(e, "no_owner") ||
        isKairosError(e, "not_owner") ||
        isKairosError(e, "overloaded") ||
        isKairosError(e, "unavailable") ||
        isKairosError(e, "rate_limited");
      if (!retryable || attempt >= 20) throw e;
      await new Promise((r) => setTimeout(r, Math.min(2_000, 50 * 2 ** attempt)));
    }
  }
}

const PARTITIONS = 32;
const RUNS_PER_JOB = 10;

function arg(args: string[], name: string, dflt: number): number {
  const i = args.indexOf(`--${name}`);
  const v = i >= 0 ? Number(args[i + 1]) : dflt;
  if (!Number.isFinite(v) || v < 0) throw new Error(`--${name} must be a number ≥ 0`);
  return v;
}
const pct = (sorted: number[], p: number) =>
  sorted.length === 0
    ? null
    : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

interface TenantPlan {
  name: string;
  weight: number;
  cap: number;
  backlog: number;
  id?: string;
}

export async function run(args: string[]): Promise<void> {
  const seconds = arg(args, "seconds", 60);
  const slots = arg(args, "slots", 40);
  const durationMs = arg(args, "duration-ms", 1000);
  const backlog = arg(args, "backlog", 100_000);
  const warmupS = arg(args, "warmup-s", 5);
  process.env["KAIROS_LOG_LEVEL"] ??= "error";
  const throughput = slots / (durationMs / 1000); // runs/s the whole fleet can start
  const outlast = Math.ceil(throughput * (seconds + warmupS + 30));
  const plans: TenantPlan[] = [
    { name: "large-a", weight: 1, cap: 100_000, backlog },
    { name: "large-b", weight: 1, cap: 100_000, backlog: outlast },
    { name: "large-c", weight: 2, cap: Math.max(1, Math.floor(slots * 0.4)), backlog: outlast },
    { name: "small", weight: 1, cap: 100, backlog: 0 },
  ];
  const nats = await startNats();
  const adminNc = await nats.connect("fairness-admin");
  const tenants = new KvTenantDirectory(
    (await openBuckets(adminNc, { clusterName: "kairos", replicas: 1 })).tenants,
    { clock: systemClock },
  );
  const proc = await startKairos(
    makeNodeConfig({
      natsUrl: nats.url,
      natsAuth: { credsFile: nats.credsFor(["api", "scheduler"]) },
      nodeId: "fairness",
      roles: ["api", "scheduler"],
      partitions: PARTITIONS,
    }),
    { executor: "noop", workerSlots: 0, apiHost: "127.0.0.1", apiPort: 0 },
  );
  let summary: Record<string, unknown> | undefined;
  const worker = spawnNode({
    natsUrl: nats.url,
    creds: nats.credsFor(["worker"]),
    nodeId: "fairness-worker",
    roles: "worker",
    partitions: PARTITIONS,
    extraArgs: [
      "--executor",
      "noop",
      "--slots",
      String(slots),
      "--noop-duration-ms",
      String(durationMs),
    ],
    ignoreLines: RUN_LINES,
  });
  try {
    await worker.waitFor((e) => e.type === "node_started", 30_000, "worker started");
    while (proc.node.heldPartitions().length !== proc.node.partitions)
      await new Promise((r) => setTimeout(r, 50));
    for (const p of plans) {
      const { tenant } = await tenants.createTenant(p.name);
      await tenants.setQuota(tenant.tenant_id, {
        weight: p.weight,
        max_concurrent_runs: p.cap,
        max_jobs: 100_000,
      });
      p.id = tenant.tenant_id;
    }
    const idOf = (name: string) => plans.find((p) => p.name === name)!.id!;
    const svc = new NatsJobsService(
      proc.node.router,
      proc.node.buckets,
      proc.node.partitions,
      systemRandom,
    );
    const backlogSpec: JobSpec = {
      name: null,
      schedule: { at: new Date(systemClock.now() + 86_400_000).toISOString() },
      task: { image: "noop", args: ["noop"], env: {}, timeout_s: 3600 },
      retry: { max_attempts: 1, backoff: "exponential", base_s: 10, max_s: 3600 },
      overlap: "allow",
      misfire: { policy: "run_once", starting_deadline_s: null },
      flex_window_s: 0,
      enabled: true,
    };
    // Backlogs: the largest first (it runs alone meanwhile), then the others; 64 requests in flight.
    const t0 = performance.now();
    for (const p of [...plans].sort((a, b) => b.backlog - a.backlog)) {
      if (p.backlog === 0) continue;
      const jobs = Math.ceil(p.backlog / RUNS_PER_JOB);
      const ids: string[] = [];
      let next = 0;
      await Promise.all(
        Array.from({ length: 64 }, async () => {
          while (next < jobs) {
            next++;
            ids.push((await setUpStep(() => svc.createJob(p.id!, backlogSpec))).job.job_id);
          }
        }),
      );
      let made = 0;
      await Promise.all(
        Array.from({ length: 64 }, async () => {
          while (made < p.backlog) {
            const i = made++;
            await setUpStep(() => svc.runNow(p.id!, ids[i % ids.length]!));
          }
        }),
      );
      console.log(
        `${p.name}: ${p.backlog} runs queued on ${jobs} jobs (${((performance.now() - t0) / 1000).toFixed(1)} s since set-up began)`,
      );
    }
    // The small tenant: two jobs every 2 s, from now on.
    const smallSpec: JobSpec = {
      ...backlogSpec,
      schedule: { cron: "*/2 * * * * *", time_zone: "UTC" },
      overlap: "skip",
      task: { ...backlogSpec.task, timeout_s: 60 },
    };
    for (let i = 0; i < 2; i++) await svc.createJob(idOf("small"), smallSpec);
    const windowStart = systemClock.now() + warmupS * 1000;
    const windowEnd = windowStart + seconds * 1000;
    console.log(
      `set-up ${((performance.now() - t0) / 1000).toFixed(1)} s; warm-up ${warmupS} s, then measuring for ${seconds} s`,
    );
    // Sample grants (tenant actors) and shares (fleet actor) through the window.
    const grantSamples = new Map<string, number[]>(plans.map((p) => [p.name, []]));
    const waitingSamples = new Map<string, number[]>(plans.map((p) => [p.name, []]));
    const smallDemand: number[] = [];
    let capSamplesExceeded = 0;
    let lastFleet: FleetStatus | undefined;
    while (systemClock.now() < windowEnd) {
      await new Promise((r) => setTimeout(r, 500));
      if (systemClock.now() < windowStart) continue;
      await Promise.all(
        plans.map(async (p) => {
          const s = await proc.node.router
            .request<{ running: number; waiting: number }>(
              { type: TENANT_ACTOR, id: p.id! },
              { kind: "status" },
              { deadlineMs: 2_000 },
            )
            .catch(() => undefined);
          if (!s) return;
          grantSamples.get(p.name)!.push(s.running);
          waitingSamples.get(p.name)!.push(s.waiting);
          if (s.running > p.cap) capSamplesExceeded++;
        }),
      );
      lastFleet = await proc.node.router
        .request<FleetStatus>(
          { type: FLEET_ACTOR, id: FLEET_ID },
          { kind: "status" },
          { deadlineMs: 2_000 },
        )
        .catch(() => lastFleet);
      smallDemand.push(lastFleet?.tenants.find((t) => t.tenant === idOf("small"))?.demand ?? 0);
    }
    const runs = (await proc.node.buckets.runs.list(">")).map((e) => decode<RunView>(e.value));
    const nameOf = new Map(plans.map((p) => [p.id!, p.name]));
    const windowMs = windowEnd - windowStart;
    // Slot-time in use per tenant within the window, and cap checks from the attempt intervals.
    const usage = new Map<string, number>(plans.map((p) => [p.name, 0]));
    const intervals = new Map<string, [number, number][]>(plans.map((p) => [p.name, []]));
    for (const r of runs) {
      const name = nameOf.get(r.tenant_id);
      if (!name) continue;
      for (const a of r.attempts) {
        if (!a.started_at) continue;
        const s = Date.parse(a.started_at);
        const f = a.finished_at ? Date.parse(a.finished_at) : windowEnd;
        intervals.get(name)!.push([s, f]);
        const overlap = Math.min(f, windowEnd) - Math.max(s, windowStart);
        if (overlap > 0) usage.set(name, usage.get(name)! + overlap);
      }
    }
    let capExceeded = capSamplesExceeded;
    for (const p of plans) {
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
    const avgSlots = (name: string) => usage.get(name)! / windowMs;
    const used = plans.reduce((n, p) => n + avgSlots(p.name), 0);
    const smallReserved =
      smallDemand.length > 0 ? smallDemand.reduce((a, b) => a + b, 0) / smallDemand.length : 0;
    const demandOf = (p: TenantPlan) => (p.name === "small" ? smallReserved : p.cap);
    const expected = waterFill(
      slots,
      plans.map((p) => ({ demand: demandOf(p), weight: p.weight })),
    );
    const integer = maxMinShares(
      slots,
      plans.map((p) => ({
        tenant: p.name,
        demand: p.name === "small" ? Math.ceil(smallReserved) : Math.min(p.cap, slots),
        weight: p.weight,
      })),
    );
    const large = plans.map((p, i) => ({ p, i })).filter(({ p }) => p.name !== "small");
    const largeUsed = large.reduce((n, { p }) => n + avgSlots(p.name), 0);
    const largeExpected = large.reduce((n, { i }) => n + expected[i]!, 0);
    const shares: Record<
      string,
      {
        weight: number;
        cap: number;
        measured: number;
        expected: number;
        slots_in_use: number;
        fleet_share: number | null;
        grants_mean: number | null;
      }
    > = {};
    let maxErr = 0;
    plans.forEach((p, i) => {
      const isSmall = p.name === "small";
      const measured = isSmall
        ? avgSlots(p.name) / slots
        : largeUsed > 0
          ? avgSlots(p.name) / largeUsed
          : 0;
      const exp = isSmall ? expected[i]! / slots : expected[i]! / largeExpected;
      const g = grantSamples.get(p.name)!;
      shares[p.name] = {
        weight: p.weight,
        cap: p.cap,
        measured: +measured.toFixed(4),
        expected: +exp.toFixed(4),
        slots_in_use: +avgSlots(p.name).toFixed(2),
        fleet_share: lastFleet?.tenants.find((t) => t.tenant === p.id)?.share ?? null,
        grants_mean: g.length > 0 ? +(g.reduce((a, b) => a + b, 0) / g.length).toFixed(2) : null,
      };
      if (!isSmall && exp > 0) maxErr = Math.max(maxErr, Math.abs(measured - exp) / exp);
    });
    // The small tenant's lag: runs due in the window.
    const endMs = systemClock.now();
    const smallRuns = runs.filter(
      (r) =>
        r.tenant_id === idOf("small") &&
        Date.parse(r.scheduled_for) >= windowStart &&
        Date.parse(r.scheduled_for) < windowEnd,
    );
    const lags = smallRuns
      .filter((r) => r.status !== "skipped" && r.status !== "missed")
      .map(
        (r) =>
          (r.attempts[0]?.started_at ? Date.parse(r.attempts[0].started_at) : endMs) -
          Date.parse(r.scheduled_for),
      )
      .sort((a, b) => a - b);
    const skipped = smallRuns.filter((r) => r.status === "skipped").length;
    const waitingA = waitingSamples.get("large-a")!;
    const lines = [
      `fleet: ${slots} slots, runs of ${durationMs} ms (${throughput.toFixed(0)} runs/s at full use); window ${seconds} s after ${warmupS} s of warm-up`,
      `slots in use (average over the window): ${used.toFixed(1)} of ${slots} (${((used / slots) * 100).toFixed(0)}%); the small tenant's reported demand (mean): ${smallReserved.toFixed(2)}`,
      ...plans.map((p) => {
        const s = shares[p.name]!;
        const basis =
          p.name === "small" ? "of all slots (in use vs reserved)" : "of the large tenants' slots";
        return `${p.name.padEnd(8)} weight ${p.weight}, cap ${p.cap}: ${s.slots_in_use} slots in use; measured ${(s.measured * 100).toFixed(1)}% vs weighted max-min ${(s.expected * 100).toFixed(1)}% ${basis} (whole slots: ${integer.get(p.name)}); last fleet share ${s.fleet_share ?? "-"}, grants held (mean of samples) ${s.grants_mean ?? "-"}`;
      }),
      `max share error (large tenants, relative): ${(maxErr * 100).toFixed(1)}%; cap exceeded: ${capExceeded}`,
      `large-a runs waiting during the window: ${waitingA.length > 0 ? `${Math.min(...waitingA)}–${Math.max(...waitingA)}` : "no samples"}`,
      `small tenant: ${smallRuns.length} runs due in the window (${skipped} skipped: the previous still active); lag ms p50 ${pct(lags, 50)}, p90 ${pct(lags, 90)}, p99 ${pct(lags, 99)}, max ${lags[lags.length - 1] ?? null}`,
    ];
    for (const l of lines) console.log(l);
    if (!args.includes("--no-md")) {
      await appendSection(
        "fairness (weighted max-min shares under overload, noop executor)",
        [
          `date: ${new Date().toISOString()}; machine: ${machine()}`,
          `command: \`npm run bench -- fairness --seconds ${seconds} --slots ${slots} --duration-ms ${durationMs} --backlog ${backlog} --warmup-s ${warmupS}\` (one scheduler node in-process, ${PARTITIONS} partitions; one worker process; one nats-server; all on this machine)`,
        ],
        lines,
      );
    }
    summary = {
      shares,
      max_share_error: +maxErr.toFixed(4),
      cap_exceeded: capExceeded,
      small_tenant_p99_lag_ms: pct(lags, 99),
      slots,
      seconds,
      utilisation: +(used / slots).toFixed(3),
      large_a_waiting_min: waitingA.length > 0 ? Math.min(...waitingA) : null,
    };
  } finally {
    await worker.stop();
    await proc.stop();
    await adminNc.close();
    await nats.stop();
  }
  // Last, after everything has stopped (nothing may print after it).
  console.log(JSON.stringify(summary));
}
