/**
 * The job actor's shell: performs the effects its pure core decides.
 * - `put_run` (before the job state write): the run record in the `runs` bucket — `create` for a
 *   new occurrence (an existing key means a crash re-fired it: fine), otherwise CAS on the
 *   record's revision (cached per node, read back on a miss or conflict).
 * - `acquire_slot` / `release_slot`: requests to the tenant actor.
 * - `dispatch`: offer the run to a worker with a free slot (worker directory); the worker's
 *   acceptance comes back to the actor as `claimed`, a refusal from every worker as
 *   `dispatch_failed` (the core re-tries after a delay).
 * - `cancel_on_worker`: tell a worker to kill an attempt.
 * - `dead_letter`: logged, and POSTed (HMAC-signed) to the tenant's webhook when it has one.
 */
import type { Bus } from "../cluster/bus.ts";
import type { ActorRegistration, ShellContext } from "../actors/host.ts";
import { KairosError } from "../lib/errors.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { KvStore } from "../cluster/kv.ts";
import type { ActorRouter } from "../cluster/router.ts";
import type { WorkerDirectory } from "../worker/directory.ts";
import { workerSubject } from "../worker/directory.ts";
import { TENANT_ACTOR, runKey, splitJobActorId } from "./ids.ts";
import type { JobEffect, JobActorConfig } from "./job-actor.ts";
import { makeJobActor } from "./job-actor.ts";
import type { RunView } from "./model.ts";
import type { StartRequest, StartReply } from "../worker/protocol.ts";
import { notifyDeadLetter, type WebhookTarget } from "./webhook.ts";

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
  /** The tenant's dead-letter webhook, if any (from its record; cached by the caller). */
  tenantWebhook?: (tenantId: string) => Promise<WebhookTarget | undefined>;
  /** Wall-clock seconds and a sleep, for webhook signatures and retries. */
  nowS?: () => number;
  sleep?: (ms: number) => Promise<void>;
}

const REVISION_CACHE_LIMIT = 100_000;

export function jobRegistration(cfg: JobActorConfig, deps: JobShellDeps): ActorRegistration {
  const revisions = new Map<string, number>();
  const remember = (key: string, rev: number) => {
    if (revisions.size >= REVISION_CACHE_LIMIT) revisions.delete(revisions.keys().next().value!);
    revisions.set(key, rev);
  };

  async function putRun(ctx: ShellContext, record: RunView, create: boolean): Promise<void> {
    const key = runKey(ctx.partition, record.tenant_id, record.job_id, record.run_id);
    const value = encode(record);
    if (create) {
      const r = await deps.runs.create(key, value);
      if (r.ok) remember(key, r.revision);
      return;
    }
    for (let i = 0; i < 3; i++) {
      let rev = revisions.get(key);
      if (rev === undefined) rev = (await deps.runs.get(key))?.revision ?? 0;
      const r = await deps.runs.update(key, value, rev);
      if (r.ok) return remember(key, r.revision);
      revisions.delete(key);
    }
    throw new KairosError("conflict", `run record ${record.run_id} keeps changing under this owner`);
  }

  async function dispatch(ctx: ShellContext, fx: Extract<JobEffect, { kind: "dispatch" }>): Promise<void> {
    const { tenantId, jobId } = splitJobActorId(ctx.address.id);
    const tried = new Set<string>();
    for (let i = 0; i < 3; i++) {
      const worker = deps.workers.pick(tried);
      if (!worker) break;
      tried.add(worker);
      const req: StartRequest = {
        job_actor: ctx.address.id, tenant_id: tenantId, job_id: jobId, run_id: fx.run_id, attempt: fx.attempt,
        fence: fx.fence, scheduled_for_ms: fx.scheduled_for_ms, start_at_ms: fx.start_at_ms, task: fx.task,
      };
      try {
        const m = await deps.nc.request(workerSubject(deps.clusterName, worker, "start"), encode(req), { timeout: 2000 });
        const reply = decode<StartReply>(m.data);
        if (reply.accepted) {
          ctx.tell({ kind: "claimed", run_id: fx.run_id, fence: fx.fence, worker });
          return;
        }
        deps.workers.markFull(worker);
      } catch {
        deps.workers.markFull(worker);
      }
    }
    ctx.tell({ kind: "dispatch_failed", run_id: fx.run_id, fence: fx.fence, reason: tried.size === 0 ? "no worker with a free slot" : "workers refused" });
  }

  async function post(ctx: ShellContext, fx: JobEffect): Promise<void> {
    const tenant = { type: TENANT_ACTOR, id: splitJobActorId(ctx.address.id).tenantId };
    switch (fx.kind) {
      case "acquire_slot": {
        const max = await deps.tenantMaxConcurrent?.(tenant.id);
        const reply = await deps.router().request<{ granted: boolean }>(tenant, {
          kind: "acquire", run_id: fx.run_id, job: ctx.address.id, ttl_ms: fx.timeout_s * 1000 + (deps.slotGraceMs ?? 120_000),
          ...(max !== undefined ? { max_concurrent: max } : {}),
        });
        if (reply.granted) ctx.tell({ kind: "slot_granted", run_id: fx.run_id });
        return;
      }
      case "release_slot":
        await deps.router().request(tenant, { kind: "release", run_id: fx.run_id });
        return;
      case "dispatch":
        return dispatch(ctx, fx);
      case "cancel_on_worker":
        deps.nc.publish(workerSubject(deps.clusterName, fx.worker, "cancel"), encode({ run_id: fx.run_id, fence: fx.fence }));
        return;
      case "dead_letter": {
        deps.log("warn", "run dead-lettered", { run_id: fx.record.run_id, job_id: fx.record.job_id, status: fx.record.status, reason: fx.record.reason });
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
    definition: makeJobActor(cfg),
    async perform(pre, ctx) {
      for (const fx of pre as JobEffect[]) if (fx.kind === "put_run") await putRun(ctx, fx.record, fx.create);
    },
    performPost(effects, ctx) {
      for (const fx of effects as JobEffect[]) {
        post(ctx, fx).catch((e: unknown) => {
          deps.log("warn", `job effect ${fx.kind} failed`, { job: ctx.address.id, err: String(e) });
          if (fx.kind === "acquire_slot") ctx.tell({ kind: "retry_later", run_id: fx.run_id });
        });
      }
    },
  };
}
