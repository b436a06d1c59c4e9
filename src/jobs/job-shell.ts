/**
 * The job actor's shell: performs the effects its pure core decides.
 * - `put_run` (before the job state write): the run record in the `runs` bucket, stamped with the
 *   partition epoch (`_e`) — `create` for a new occurrence (an existing key means a crash
 *   re-fired it: fine); `update` with CAS on the record's revision (cached per node); on a
 *   conflict it re-reads and refuses (`not_owner`) if a later epoch wrote the record — never a
 *   blind overwrite; `terminal`/`settle` settle an orphaned non-terminal record (see JobEffect).
 * - `acquire_slot` / `release_slot`: requests to the tenant actor.
 * - `dispatch`: offer the attempt to ONE worker with a free slot (worker directory) under the
 *   offer's own fence; its acceptance comes back to the actor as `claimed`, a refusal or a
 *   timeout as `dispatch_failed` (the core offers again later under a new fence).
 * Every network effect first checks that this node still owns the actor (`stillOwner`).
 *   A task with `sealed_env` has its secrets opened into its env for that one offer
 *   (`secrets`, secret-env.ts); without them the offer is not made (`dispatch_failed`).
 * - `cancel_on_worker`: tell a worker to kill an attempt.
 * - `dead_letter`: logged, and POSTed (HMAC-signed) to the tenant's webhook when it has one.
 *   With `deadLetters`, durably: the terminal record's write is followed (still before the state
 *   write) by the run's dead-letter and outbox keys, and the POST goes through the outbox
 *   (dead-letters.ts), so a crash re-delivers.
 * Run-path metrics are derived from the records `putRun` writes (run-metrics.ts).
 * With `retention`, the actor is wrapped by `withRetention` and its `prune_runs` / `purge_job`
 * effects go to `RunRetention` (bounded history: retention.ts, run-retention.ts).
 */
import type { Bus } from "../cluster/bus.ts";
import type { ActorRegistration, ShellContext } from "../actors/host.ts";
import { KairosError } from "../lib/errors.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { KvStore } from "../cluster/kv.ts";
import type { ActorRouter } from "../cluster/router.ts";
import type { WorkerDirectory } from "./worker-directory.ts";
import { workerSubject, type StartRequest, type StartReply } from "../protocol/worker.ts";
import { TENANT_ACTOR, runKey, splitJobActorId } from "./ids.ts";
import { decodeRunRecord, encodeRunRecord } from "./run-record.ts";
import { TERMINAL } from "./model.ts";
import type { JobEffect, JobActorConfig } from "./job-actor.ts";
import { makeJobActor } from "./job-actor.ts";
import type { RunView, TaskInput } from "./model.ts";
import type { SecretEnvStore } from "./secret-env.ts";
import { notifyDeadLetter, type WebhookTarget } from "./webhook.ts";
import { RunMetrics } from "./run-metrics.ts";
import { isRetentionEffect, withRetention, type RetentionEffect } from "./retention.ts";
import type { RunRetention } from "./run-retention.ts";
import { isDeadLetter, recordDeadLetter, type DeadLetterOutbox } from "./dead-letters.ts";

export interface JobShellDeps {
  nc: Bus;
  clusterName: string;
  runs: KvStore;
  router: () => ActorRouter;
  workers: WorkerDirectory;
  log: (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;
  /** Slot grants outlive the run's timeout by this much. */
  slotGraceMs?: number;
  /** The tenant's maximum of concurrent runs (from its record; cached by the caller). */
  tenantMaxConcurrent?: (tenantId: string) => Promise<number | undefined>;
  /** The tenant's weight for fair shares (from its record; cached by the caller). */
  tenantWeight?: (tenantId: string) => Promise<number | undefined>;
  /** The tenant's dead-letter webhook, if any (from its record; cached by the caller). */
  tenantWebhook?: (tenantId: string) => Promise<WebhookTarget | undefined>;
  /** Wall-clock seconds and a sleep, for webhook signatures and retries. */
  nowS?: () => number;
  sleep?: (ms: number) => Promise<void>;
  /** Counts run transitions from the records written (default: into the Prometheus registry). */
  runMetrics?: RunMetrics;
  /** Bounded history (run retention, deleted jobs purged); none: records are kept forever. */
  retention?: RunRetention;
  /** The durable dead-letter list and webhook outbox (dead-letters.ts); without it, in memory. */
  deadLetters?: DeadLetterOutbox;
  /** Opens `task.sealed_env` for an offer (needs the cluster secret key); none: such runs wait. */
  secrets?: SecretEnvStore;
}

const REVISION_CACHE_LIMIT = 100_000;
/** How long to wait before offering again to a worker that had no free slot (see dispatch). */
const OFFER_RACE_RETRY_MS = 25;

export function jobRegistration(cfg: JobActorConfig, deps: JobShellDeps): ActorRegistration {
  const revisions = new Map<string, number>();
  const metrics = deps.runMetrics ?? new RunMetrics();
  const remember = (key: string, rev: number) => {
    if (revisions.size >= REVISION_CACHE_LIMIT) revisions.delete(revisions.keys().next().value!);
    revisions.set(key, rev);
  };

  /** Writes a run record (see the module header); throws `not_owner` when a later epoch wrote it. */
  async function putRun(ctx: ShellContext, record: RunView, mode: "create" | "update" | "terminal" | "settle"): Promise<void> {
    const key = runKey(ctx.partition, record.tenant_id, record.job_id, record.run_id);
    const value = encodeRunRecord(record, ctx.epoch);
    if (mode === "create" || mode === "terminal") {
      const r = await deps.runs.create(key, value);
      if (r.ok) {
        metrics.written(key, record, true, () => ctx.stillOwner());
        return remember(key, r.revision);
      }
      if (mode === "create") return; // re-fired after a crash: the record is there
    }
    for (let i = 0; i < 3; i++) {
      let rev = mode === "update" ? revisions.get(key) : undefined;
      if (rev === undefined) {
        const e = await deps.runs.get(key);
        if (!e) {
          if (mode === "update") rev = 0;
          else return; // settle: nothing was left behind
        } else {
          const stored = decodeRunRecord(e.value);
          metrics.known(key, stored.record);
          if (stored.epoch > ctx.epoch) throw new KairosError("not_owner", `run record ${record.run_id} was written under a later epoch (${stored.epoch} > ${ctx.epoch})`);
          if (mode !== "update" && TERMINAL.has(stored.record.status)) return; // already settled
          rev = e.revision;
        }
      }
      const r = rev === 0 ? await deps.runs.create(key, value) : await deps.runs.update(key, value, rev);
      if (r.ok) {
        metrics.written(key, record, rev === 0, () => ctx.stillOwner());
        return remember(key, r.revision);
      }
      revisions.delete(key);
    }
    throw new KairosError("conflict", `run record ${record.run_id} keeps changing under this owner`);
  }

  /** The task as offered: its secrets opened into its env; null when they cannot be (logged). */
  async function offeredTask(tenantId: string, jobId: string, task: TaskInput): Promise<TaskInput | null> {
    if (!task.sealed_env) return task;
    const { sealed_env: sealed, ...rest } = task;
    try {
      if (!deps.secrets) throw new KairosError("unsupported", "this scheduler has no secret key (--secret-key-file)");
      return { ...rest, env: { ...rest.env, ...(await deps.secrets.open(tenantId, jobId, sealed)) } };
    } catch (e) {
      deps.log("error", "secret_env cannot be opened: the run is not offered", { job: `${tenantId}.${jobId}`, err: String(e) });
      return null;
    }
  }

  async function dispatch(ctx: ShellContext, fx: Extract<JobEffect, { kind: "dispatch" }>): Promise<void> {
    const { tenantId, jobId } = splitJobActorId(ctx.address.id);
    // Only a task with secrets waits for a read (no await otherwise: offers keep their timing).
    const task = fx.task.sealed_env ? await offeredTask(tenantId, jobId, fx.task) : fx.task;
    if (!task) {
      ctx.tell({ kind: "dispatch_failed", run_id: fx.run_id, fence: fx.fence, reason: "secret_env cannot be opened on this scheduler" });
      return;
    }
    const tried = new Set<string>();
    // One fence, one worker. (The test-only hole 1 offers it to up to three, as before the fix.)
    const tries = cfg.testOnlyHole1 ? 3 : 1;
    for (let i = 0; i < tries; i++) {
      const worker = deps.workers.pick(tried);
      if (!worker) break;
      tried.add(worker);
      if (!ctx.stillOwner()) return;
      const req: StartRequest = {
        job_actor: ctx.address.id, tenant_id: tenantId, job_id: jobId, run_id: fx.run_id, attempt: fx.attempt,
        fence: fx.fence, scheduled_for_ms: fx.scheduled_for_ms, start_at_ms: fx.start_at_ms, task,
        lease_ttl_ms: cfg.leaseTtlMs,
      };
      try {
        const offer = async () => decode<StartReply>((await deps.nc.request(workerSubject(deps.clusterName, worker, "start"), encode(req), { timeout: cfg.offerTimeoutMs })).data);
        let reply = await offer();
        // A worker frees a slot only once its completion is acknowledged, so an offer for the
        // slot that completion released can arrive first: ask the same worker (same fence) once
        // more, shortly, instead of waiting for the redispatch delay and its next heartbeat.
        if (!reply.accepted && reply.reason === "no free slot" && deps.sleep) {
          await deps.sleep(OFFER_RACE_RETRY_MS);
          if (!ctx.stillOwner()) return;
          reply = await offer();
        }
        if (reply.accepted) {
          ctx.tell({ kind: "claimed", run_id: fx.run_id, fence: fx.fence, worker });
          return;
        }
        deps.workers.markFull(worker);
      } catch {
        // No answer in time: the offer is dead (the worker cannot start it without our ack).
        deps.workers.markFull(worker);
      }
    }
    ctx.tell({ kind: "dispatch_failed", run_id: fx.run_id, fence: fx.fence, reason: tried.size === 0 ? "no worker with a free slot" : "worker refused or did not answer" });
  }

  async function post(ctx: ShellContext, fx: JobEffect): Promise<void> {
    if (!ctx.stillOwner()) return; // a stale owner stays silent
    const tenant = { type: TENANT_ACTOR, id: splitJobActorId(ctx.address.id).tenantId };
    switch (fx.kind) {
      case "acquire_slot": {
        const max = await deps.tenantMaxConcurrent?.(tenant.id);
        const weight = await deps.tenantWeight?.(tenant.id);
        const reply = await deps.router().request<{ granted: boolean }>(tenant, {
          kind: "acquire", run_id: fx.grant, job: ctx.address.id, ttl_ms: fx.timeout_s * 1000 + (deps.slotGraceMs ?? 120_000),
          ...(max !== undefined ? { max_concurrent: max } : {}), ...(weight !== undefined ? { weight } : {}),
        });
        if (reply.granted) ctx.tell({ kind: "slot_granted", run_id: fx.grant });
        return;
      }
      case "release_slot":
        await deps.router().request(tenant, { kind: "release", run_id: fx.grant });
        return;
      case "dispatch":
        return dispatch(ctx, fx);
      case "cancel_on_worker":
        deps.nc.publish(workerSubject(deps.clusterName, fx.worker, "cancel"), encode({ run_id: fx.run_id, fence: fx.fence }));
        return;
      case "dead_letter": {
        deps.log("warn", "run dead-lettered", { run_id: fx.record.run_id, job_id: fx.record.job_id, status: fx.record.status, reason: fx.record.reason });
        if (deps.deadLetters) return deps.deadLetters.kick(ctx.partition, fx.record.tenant_id, fx.record.run_id);
        const target = await deps.tenantWebhook?.(fx.record.tenant_id);
        if (!target || !deps.nowS || !deps.sleep) return;
        const r = await notifyDeadLetter(target, fx.record, { nowS: deps.nowS, sleep: deps.sleep });
        if (!r.ok) deps.log("warn", "dead-letter webhook failed", { run_id: fx.record.run_id, status: r.status, err: r.error });
        return;
      }
      case "put_run":
        return;
    }
  }

  return {
    definition: deps.retention ? withRetention(makeJobActor(cfg), deps.retention.config) : makeJobActor(cfg),
    async perform(pre, ctx) {
      for (const fx of pre as JobEffect[]) {
        // Re-checked before each write: a long series (catch-up records) must not outlive ownership.
        if (!ctx.stillOwner()) throw new KairosError("not_owner", `${ctx.address.type}/${ctx.address.id}: no longer the owner`);
        if (fx.kind === "put_run") await putRun(ctx, fx.record, fx.mode);
        if (fx.kind === "put_run" && fx.mode === "update" && deps.deadLetters && isDeadLetter(fx.record)) await recordDeadLetter(deps.runs, ctx.partition, fx.record);
      }
    },
    performPost(effects, ctx) {
      for (const fx of effects as (JobEffect | RetentionEffect)[]) {
        if (isRetentionEffect(fx)) {
          deps.retention?.perform(ctx.partition, ctx.address.id, fx).catch((e: unknown) => {
            deps.log("warn", `job effect ${fx.kind} failed`, { job: ctx.address.id, err: String(e) });
          });
          continue;
        }
        metrics.effect(fx, () => ctx.stillOwner());
        post(ctx, fx).catch((e: unknown) => {
          deps.log("warn", `job effect ${fx.kind} failed`, { job: ctx.address.id, err: String(e) });
          // No immediate re-ask: the run's slot_check timer asks again (SLOT_RECHECK_MS). Re-asking
          // at once after a timeout turned an overloaded tenant actor into a retry storm.
        });
      }
    },
  };
}
