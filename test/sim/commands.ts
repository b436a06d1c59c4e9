/**
 * The simulation's user: a client process (no faults of its own) that creates the seed's jobs and,
 * while faults happen, sends the commands an operator or customer sends — pause and resume, a
 * schedule change, run-now, delete — through the production service (`NatsJobsService`, the
 * API's path to the job actors).
 *
 * Every command but run-now sets a state (paused, resumed, this schedule, deleted), so sending it
 * again after a failure (the router's deadline, no owner during a handoff) is safe: it is retried
 * until answered, and its window — first send to answer — is what the record check treats as
 * "either way" (record-check.ts). A run-now is sent once: a failed one may or may not have made a
 * run (a manual run is never "unexpected"); an answered one must have its record. Commands to one
 * job go one at a time, in the planned order.
 */
import { ActorRouter } from "../../src/cluster/router.ts";
import type { Buckets } from "../../src/cluster/buckets.ts";
import { NatsJobsService } from "../../src/service/nats-service.ts";
import type { JobSpec } from "../../src/protocol/model.ts";
import { isKairosError } from "../../src/lib/errors.ts";
import type { Random } from "../../src/lib/random.ts";
import { between } from "./draw.ts";
import type { CommandKind, CommandRecord, JobUnderTest } from "./record-check.ts";
import type { SimBus } from "./sim-bus.ts";
import { SimProcess, type SimClock } from "./sim-clock.ts";

export interface PlannedCommand {
  atMs: number;
  job: JobUnderTest;
  kind: CommandKind;
  /** pause, resume, reschedule: the spec it leaves. */
  spec?: JobSpec;
}

/**
 * A seed's commands within [fromMs, toMs) (simulation time): run-now of any job, a pause of a
 * cron job followed 3–20 s later by its resume, a schedule change of a cron job (another period),
 * and at most one delete — each job's commands in time order.
 */
export function planCommands(
  r: Random,
  jobs: readonly JobUnderTest[],
  n: number,
  fromMs: number,
  toMs: number,
): PlannedCommand[] {
  const out: PlannedCommand[] = [];
  const specOf = new Map(jobs.map((j) => [j.jobId, j.spec]));
  const busyUntil = new Map<string, number>();
  let deleted = false;
  for (let i = 0; i < n; i++) {
    const job = jobs[Math.floor(r.next() * jobs.length)]!;
    const at = Math.max(between(r, fromMs, toMs), busyUntil.get(job.jobId) ?? 0);
    if (at >= toMs) continue;
    const cur = specOf.get(job.jobId)!;
    const cron = "cron" in cur.schedule;
    const roll = r.next();
    if (roll < 0.35 || !cron) {
      out.push({ atMs: at, job, kind: "run_now" });
      busyUntil.set(job.jobId, at + 1);
    } else if (roll < 0.65) {
      const paused = { ...cur, enabled: false };
      const resumeAt = at + between(r, 3000, 20_000);
      out.push({ atMs: at, job, kind: "pause", spec: paused });
      out.push({ atMs: resumeAt, job, kind: "resume", spec: cur });
      busyUntil.set(job.jobId, resumeAt + 1);
    } else if (roll < 0.9 || deleted) {
      const periods = [3, 4, 5, 6, 10, 15, 20].filter((p) => cur.overlap !== "queue" || p >= 5);
      const period = periods[Math.floor(r.next() * periods.length)]!;
      const next = { ...cur, schedule: { cron: `*/${period} * * * * *`, time_zone: "UTC" } };
      out.push({ atMs: at, job, kind: "reschedule", spec: next });
      specOf.set(job.jobId, next);
      busyUntil.set(job.jobId, at + 1);
    } else {
      deleted = true;
      out.push({ atMs: at, job, kind: "delete" });
      busyUntil.set(job.jobId, Number.POSITIVE_INFINITY);
    }
  }
  return out.sort((a, b) => a.atMs - b.atMs);
}

export class SimClient {
  readonly process: SimProcess;
  readonly router: ActorRouter;
  readonly service: NatsJobsService;
  readonly log: CommandRecord[] = [];
  readonly #sim: SimClock;
  readonly #queues = new Map<string, Promise<void>>();
  readonly #trace: (line: string) => void;

  constructor(o: {
    sim: SimClock;
    bus: SimBus;
    shared: Buckets;
    cluster: string;
    partitions: number;
    random: () => Random;
    trace: (line: string) => void;
  }) {
    this.#sim = o.sim;
    this.#trace = o.trace;
    this.process = new SimProcess(o.sim, "client", 0);
    const ep = o.bus.endpoint("client", this.process);
    this.router = new ActorRouter({
      nc: ep,
      clusterName: o.cluster,
      clock: this.process.clock,
      random: o.random(),
      partitions: o.partitions,
      deadlineMs: 10_000,
    });
    this.service = new NatsJobsService(this.router, o.shared, o.partitions, o.random());
  }

  sleep(ms: number): Promise<void> {
    return new Promise((r) => this.process.clock.setTimer(ms, r));
  }

  /** Sends `c` at its time, after the job's earlier commands. */
  schedule(c: PlannedCommand): void {
    this.#sim.setTimer(Math.max(0, c.atMs - this.#sim.now()), () => {
      const prev = this.#queues.get(c.job.jobId) ?? Promise.resolve();
      const next = prev.then(() => this.#send(c));
      this.#queues.set(c.job.jobId, next);
    });
  }

  async #send(c: PlannedCommand): Promise<void> {
    const { tenant, jobId } = c.job;
    const rec: CommandRecord = {
      jobId,
      kind: c.kind,
      sentMs: this.#sim.now(),
      ackMs: null,
      ...(c.spec ? { spec: c.spec } : {}),
    };
    this.log.push(rec);
    this.#trace(`client ${c.kind} ${tenant}/${jobId} sent`);
    for (let attempt = 1; ; attempt++) {
      try {
        switch (c.kind) {
          case "run_now":
            rec.runId = (await this.service.runNow(tenant, jobId)).run_id;
            break;
          case "pause":
          case "resume":
            await this.service.patchJob(tenant, jobId, { enabled: c.spec!.enabled });
            break;
          case "reschedule":
            await this.service.patchJob(tenant, jobId, { schedule: c.spec!.schedule });
            break;
          case "delete":
            await this.service.deleteJob(tenant, jobId);
            break;
        }
        rec.ackMs = this.#sim.now();
        this.#trace(
          `client ${c.kind} ${tenant}/${jobId} answered${rec.runId ? `: run ${rec.runId}` : ""}`,
        );
        return;
      } catch (e) {
        // A retried delete meets the job already deleted: that is its answer.
        if (c.kind === "delete" && attempt > 1 && isKairosError(e, "not_found")) {
          rec.ackMs = this.#sim.now();
          return;
        }
        this.#trace(
          `client ${c.kind} ${tenant}/${jobId} failed (${String(e)})${c.kind === "run_now" ? "" : "; sent again"}`,
        );
        if (c.kind === "run_now" || attempt >= 30) return;
        await this.sleep(1000);
      }
    }
  }
}
