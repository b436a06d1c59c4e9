/**
 * The dispatcher: performs the job actor's `dispatch` effects — it offers one attempt to ONE
 * worker with a free slot (the worker directory's pick) under the offer's own fence. Its
 * acceptance comes back to the actor as `claimed`; a refusal or no answer within the offer
 * timeout as `dispatch_failed` (the core offers again later, under a new fence). A task with
 * `sealed_env` has its secrets opened into its env for that one offer (secret-env.ts); without
 * them the offer is not made (`dispatch_failed`). With a run-token issuer, each offer carries the
 * attempt's `run_token` (src/secrets/run-token.ts), signed here: the worker never holds the key.
 * When the tenant holds a credential for the registry of the task's image, the offer carries it
 * (`registry_auth`, src/secrets/registry-credentials.ts) to that one worker, for that one pull;
 * one that cannot be read holds the offer back (`dispatch_failed`), never sends it without.
 *
 * Gotchas: a refusal "no free slot" is asked again once, 25 ms later, same worker and fence (the
 * room may have gone to another offer); a failed offer waits in the worker directory for the next
 * advert with room, which offers it again at once (`redispatch` under its fence) — at once if
 * the offer went unanswered and another worker has room, since a worker that leaves an offer
 * unanswered is benched (src/slots/worker-trust.ts); ownership is re-checked before
 * each request; only a task with secrets awaits a read before its offer, so offers keep their
 * timing (a run token's signature is local work of tens of microseconds). An egress task's offer
 * carries its tenant's egress policy as read now (`egress`), so a narrowed or cleared policy holds
 * from the next attempt on; it too is read only for such a task. An injected fault
 * (faults.ts, a simulation self-test) offers a fence to up to three.
 */
import type { ShellContext } from "../actors/host.ts";
import type { Bus } from "../cluster/bus.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { Clock } from "../lib/clock.ts";
import { KairosError } from "../lib/errors.ts";
import { splitJobActorId } from "../protocol/ids.ts";
import {
  ON_TIME_MS,
  workerSubject,
  type OfferedRegistryAuth,
  type StartReply,
  type StartRequest,
  type TaskInput,
} from "../protocol/worker.ts";
import type { SecretEnvStore } from "../secrets/secret-env.ts";
import type { RunTokenIssuer } from "../secrets/run-token.ts";
import type { WorkerDirectory } from "../slots/worker-directory.ts";
import { NO_FAULTS, type JobFaults } from "../job-state/faults.ts";
import type { JobActorConfig, JobEffect } from "../job-state/job-types.ts";

/** How long to wait before offering again to a worker that had no free slot (see dispatch). */
const OFFER_RACE_RETRY_MS = 25;

/** How the job shell reaches the workers: offers, cancels and probes, and whom to offer to. */
export interface WorkerLink {
  nc: Bus;
  clusterName: string;
  /** The workers with free slots, as their adverts say (src/slots/worker-directory.ts). */
  directory: WorkerDirectory;
}

/** What the dispatcher needs from its node. */
export interface DispatchDeps {
  link: WorkerLink;
  /** Offers carry the owner's time (`owner_now_ms`); the second ask of a full worker waits on it. */
  clock: Clock;
  log: (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;
  /** Opens `task.sealed_env` for an offer; none: such runs are not offered. */
  secrets?: SecretEnvStore;
  /** Signs each offered attempt's run token; none: offers carry no token. */
  runTokens?: RunTokenIssuer;
  /**
   * The tenant's egress policy now (null: none), read for each offer of a task with
   * `network: "egress"`; absent: such offers carry an empty policy (the attempt reaches nothing).
   */
  egressPolicy?: (tenantId: string) => Promise<readonly string[] | null>;
  /** Tenants' registry credentials (needs the cluster secret key); none: offers carry none. */
  registryAuth?: RegistryAuthSource;
  /**
   * The tenant's weight as the node holds it (no read: an offer never waits), carried by each
   * offer: a full worker gives a freed slot to the waiting run whose tenant holds fewest of its
   * slots per weight. None known: offers carry none (the worker counts 1). An awaited read here
   * stalled a 200,000-run burst: each cache expiry sent every dispatch of a tenant to KV at once.
   */
  tenantWeight?: (tenantId: string) => number | undefined;
}

/** The tenant's credential for the registry of an image; at once when cached. */
export interface RegistryAuthSource {
  lookup(
    tenantId: string,
    image: string,
  ): OfferedRegistryAuth | undefined | Promise<OfferedRegistryAuth | undefined>;
}

/**
 * The offer's registry credential: undefined when there is none (or no source); null when it
 * cannot be read (logged, without the credential). A promise only when the lookup must read.
 */
function registryAuthOf(
  deps: DispatchDeps,
  tenantId: string,
  jobId: string,
  image: string,
): OfferedRegistryAuth | undefined | null | Promise<OfferedRegistryAuth | undefined | null> {
  if (!deps.registryAuth) return undefined;
  const failed = (e: unknown): null => {
    deps.log("error", "registry credentials cannot be read: the run is not offered", {
      job: `${tenantId}.${jobId}`,
      err: String(e),
    });
    return null;
  };
  try {
    const found = deps.registryAuth.lookup(tenantId, image);
    return found instanceof Promise ? found.catch(failed) : found;
  } catch (e) {
    return failed(e);
  }
}

type DispatchEffect = Extract<JobEffect, { kind: "dispatch" }>;

/** The task as offered: its secrets opened into its env; null when they cannot be (logged). */
async function offeredTask(
  deps: DispatchDeps,
  tenantId: string,
  jobId: string,
  task: TaskInput,
): Promise<TaskInput | null> {
  if (!task.sealed_env) return task;
  const { sealed_env: sealed, ...rest } = task;
  try {
    if (!deps.secrets)
      throw new KairosError("unsupported", "this scheduler has no secret key (--secret-key-file)");
    return { ...rest, env: { ...rest.env, ...(await deps.secrets.open(tenantId, jobId, sealed)) } };
  } catch (e) {
    deps.log("error", "secret_env cannot be opened: the run is not offered", {
      job: `${tenantId}.${jobId}`,
      err: String(e),
    });
    return null;
  }
}

/** The egress policy an offer of `task` carries (undefined: not an egress task; null: unreadable, logged). */
async function egressOf(
  deps: DispatchDeps,
  tenantId: string,
  task: TaskInput,
): Promise<string[] | undefined | null> {
  if (task.network !== "egress") return undefined;
  if (!deps.egressPolicy) return [];
  try {
    return [...((await deps.egressPolicy(tenantId)) ?? [])];
  } catch (e) {
    deps.log("warn", "egress policy cannot be read: the run is not offered now", {
      tenant: tenantId,
      err: String(e),
    });
    return null;
  }
}

/** The attempt's run token (undefined: no issuer; null: minting failed, logged). */
async function runTokenOf(
  deps: DispatchDeps,
  tenantId: string,
  jobId: string,
  fx: DispatchEffect,
): Promise<string | undefined | null> {
  if (!deps.runTokens) return undefined;
  try {
    return await deps.runTokens.mint(
      {
        tenant: tenantId,
        job: jobId,
        run: fx.run_id,
        attempt: fx.attempt,
        fence: fx.fence,
        startAtMs: fx.start_at_ms,
        timeoutS: fx.task.timeout_s,
      },
      deps.clock.now(),
    );
  } catch (e) {
    deps.log("error", "run token cannot be minted: the run is not offered", {
      job: `${tenantId}.${jobId}`,
      err: String(e),
    });
    return null;
  }
}

function startRequest(
  cfg: JobActorConfig,
  clock: Clock,
  ctx: ShellContext,
  fx: DispatchEffect,
  task: TaskInput,
  runToken: string | undefined,
  egress: string[] | undefined,
  registryAuth: OfferedRegistryAuth | undefined,
): StartRequest {
  const { tenantId, jobId } = splitJobActorId(ctx.address.id);
  return {
    job_actor: ctx.address.id,
    tenant_id: tenantId,
    job_id: jobId,
    run_id: fx.run_id,
    attempt: fx.attempt,
    fence: fx.fence,
    scheduled_for_ms: fx.scheduled_for_ms,
    start_at_ms: fx.start_at_ms,
    task,
    lease_ttl_ms: cfg.leaseTtlMs,
    // The owner's clock, so a worker whose clock runs ahead does not start it early.
    owner_now_ms: clock.now(),
    ...(runToken !== undefined ? { run_token: runToken } : {}),
    ...(egress !== undefined ? { egress } : {}),
    ...(registryAuth !== undefined ? { registry_auth: registryAuth } : {}),
  };
}

/** Offers `req` to `worker`: accepted (the actor is told `claimed`), refused, or stale (no longer the owner). */
async function offerTo(
  cfg: JobActorConfig,
  deps: DispatchDeps,
  ctx: ShellContext,
  fx: DispatchEffect,
  worker: string,
  req: StartRequest,
): Promise<"accepted" | "refused" | "unanswered" | "stale"> {
  const { link, clock } = deps;
  // The worker's answer, or null: none in time, no responder, or not an answer (the offer is
  // dead either way: the worker cannot start it without our ack).
  const offer = async (): Promise<StartReply | null> => {
    try {
      const m = await link.nc.request(
        workerSubject(link.clusterName, worker, "start"),
        encode(req),
        {
          timeout: cfg.offerTimeoutMs,
        },
      );
      const reply = decode<StartReply>(m.data);
      return typeof reply === "object" && reply !== null && typeof reply.accepted === "boolean"
        ? reply
        : null;
    } catch {
      return null;
    }
  };
  let reply = await offer();
  // Its room may have gone to another scheduler's offer, or this node's reservations may lag
  // its adverts: ask the same worker (same fence) once more, shortly, instead of waiting for
  // the next advert with room.
  if (reply && !reply.accepted && reply.reason === "no free slot") {
    link.directory.markAnswered(worker);
    await new Promise<void>((resolve) => clock.setTimer(OFFER_RACE_RETRY_MS, resolve));
    if (!ctx.stillOwner()) return "stale";
    reply = await offer();
  }
  if (!reply) {
    // Benched for a while (src/slots/worker-trust.ts): a worker that sits on its offers must not
    // go on drawing runs, whatever it advertises.
    link.directory.markUnanswered(worker);
    return "unanswered";
  }
  link.directory.markAnswered(worker);
  if (reply.accepted) {
    link.directory.stopWaiting(`${ctx.address.id}/${fx.run_id}`);
    ctx.tell({ kind: "claimed", run_id: fx.run_id, fence: fx.fence, worker });
    return "accepted";
  }
  // Refused on time: its places for those are full too.
  link.directory.markFull(
    worker,
    req.start_at_ms >= (req.owner_now_ms ?? clock.now()) - ON_TIME_MS,
  );
  return "refused";
}

/** The `dispatch` effect's performer for one job actor type's shell. */
export function makeDispatcher(
  cfg: JobActorConfig,
  deps: DispatchDeps,
  faults: JobFaults = NO_FAULTS,
): (ctx: ShellContext, fx: DispatchEffect) => Promise<void> {
  return async function dispatch(ctx, fx) {
    const { tenantId, jobId } = splitJobActorId(ctx.address.id);
    // Only a task with secrets waits for a read (no await otherwise: offers keep their timing).
    const task = fx.task.sealed_env ? await offeredTask(deps, tenantId, jobId, fx.task) : fx.task;
    if (!task) {
      ctx.tell({
        kind: "dispatch_failed",
        run_id: fx.run_id,
        fence: fx.fence,
        reason: "secret_env cannot be opened on this scheduler",
      });
      return;
    }
    const runToken = await runTokenOf(deps, tenantId, jobId, fx);
    if (runToken === null) {
      ctx.tell({
        kind: "dispatch_failed",
        run_id: fx.run_id,
        fence: fx.fence,
        reason: "run token cannot be minted on this scheduler",
      });
      return;
    }
    // (Awaited only when the tenant's credentials are not cached: offers keep their timing.)
    const found = registryAuthOf(deps, tenantId, jobId, task.image);
    const registryAuth = found instanceof Promise ? await found : found;
    if (registryAuth === null) {
      ctx.tell({
        kind: "dispatch_failed",
        run_id: fx.run_id,
        fence: fx.fence,
        reason: "registry credentials cannot be read on this scheduler",
      });
      return;
    }
    // Only an egress task waits for its tenant's policy (cached by the node: start-roles.ts).
    const egress =
      fx.task.network === "egress" ? await egressOf(deps, tenantId, fx.task) : undefined;
    if (egress === null) {
      ctx.tell({
        kind: "dispatch_failed",
        run_id: fx.run_id,
        fence: fx.fence,
        reason: "the tenant's egress policy cannot be read",
      });
      return;
    }
    const weight = deps.tenantWeight?.(tenantId);
    // On time (by its start, or within ON_TIME_MS of it): the worker keeps places for it apart
    // from the backlogs', so it is not held back by their refusals nor behind their waits.
    const onTime = fx.start_at_ms >= deps.clock.now() - ON_TIME_MS;
    const tried = new Set<string>();
    let outcome: Awaited<ReturnType<typeof offerTo>> | undefined;
    // One fence, one worker. (A simulation's injected fault offers it to up to three.)
    const tries = faults.fenceSharedByWorkers === true ? 3 : 1;
    for (let i = 0; i < tries; i++) {
      const worker = deps.link.directory.pick(tried, onTime);
      if (!worker) break;
      tried.add(worker);
      if (!ctx.stillOwner()) return;
      const req = startRequest(cfg, deps.clock, ctx, fx, task, runToken, egress, registryAuth);
      if (weight !== undefined) req.weight = weight;
      outcome = await offerTo(cfg, deps, ctx, fx, worker, req);
      if (outcome === "accepted" || outcome === "stale") return;
    }
    ctx.tell({
      kind: "dispatch_failed",
      run_id: fx.run_id,
      fence: fx.fence,
      reason: tried.size === 0 ? "no worker with a free slot" : `worker ${outcome ?? "refused"}`,
    });
    const again = () => {
      if (ctx.stillOwner()) ctx.tell({ kind: "redispatch", run_id: fx.run_id, fence: fx.fence });
    };
    // A run drawn by a worker that sat on it (now benched) goes to another worker with room at
    // once: it has waited an offer timeout already.
    if (outcome === "unanswered" && deps.link.directory.hasRoom()) return again();
    // Offered again as soon as a worker advertises room (a slot freed), not only at the
    // redispatch timer; under the failed offer's fence, so a run offered again meanwhile is not.
    deps.link.directory.waitForRoom(`${ctx.address.id}/${fx.run_id}`, again, onTime);
  };
}
