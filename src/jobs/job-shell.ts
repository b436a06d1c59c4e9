/**
 * The job actor's shell: performs the effects its pure core decides (job-actor.ts), each through
 * the module of its concern — `put_run` and the runs index (record-writes.ts), `acquire_slot` /
 * `release_slot` (src/slots/slot-broker.ts), `dispatch` (dispatcher.ts), `cancel_on_worker`,
 * `probe_worker` (probe.ts), `note_run` and `create_run` (the run-record store), `dead_letter`
 * (src/notify/dead-letters.ts), `run_ended` (src/notify/run-events.ts), and with retention `prune_runs` / `purge_job`
 * (src/history/run-retention.ts). Each performer gets the dependency record it needs; run metrics
 * derive from what is written (src/history/run-metrics.ts).
 *
 * Pitfalls: every network effect first checks that this node still owns the actor
 * (`stillOwner`), so a stale owner stays silent. Post effects run concurrently and unawaited; a
 * failed one is logged, not retried here — the core's timers ask again.
 */
import type { ActorRegistration, ShellContext } from "../actors/host.ts";
import { encode } from "../cluster/codec.ts";
import type { KvStore } from "../cluster/kv.ts";
import type { ActorRouter } from "../cluster/router.ts";
import { isRetentionEffect, type RetentionEffect } from "../history/retention.ts";
import { RunMetrics } from "../history/run-metrics.ts";
import { RunRecordStore } from "../history/run-record-store.ts";
import type { RunRetention } from "../history/run-retention.ts";
import type { TenantRunLog } from "../history/tenant-run-log.ts";
import { assertNever } from "../lib/assert.ts";
import { deferOnHost, type Clock } from "../lib/clock.ts";
import { deliverDeadLetter, type DeadLetterDeps } from "../notify/dead-letters.ts";
import type { RunEvents } from "../notify/run-events.ts";
import { splitJobActorId } from "../protocol/ids.ts";
import { workerSubject } from "../protocol/worker.ts";
import type { SecretEnvStore } from "../secrets/secret-env.ts";
import type { RunTokenIssuer } from "../secrets/run-token.ts";
import { SlotBroker } from "../slots/slot-broker.ts";
import { makeDispatcher, type RegistryAuthSource, type WorkerLink } from "../runs/dispatcher.ts";
import { NO_FAULTS, type JobFaults } from "../job-state/faults.ts";
import { makeJobActor } from "./job-actor.ts";
import type { JobActorConfig, JobEffect } from "../job-state/job-types.ts";
import { makeProber } from "../runs/probe.ts";
import { makeRecordWrites } from "./record-writes.ts";
import { withRetention, withRunIndex } from "./with-history.ts";

type Log = (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;

/** Where a job's runs are recorded (src/history). */
export interface HistoryDeps {
  /** The runs bucket: run records, the runs index, dead-letter keys. */
  runs: KvStore;
  /** Counts run transitions from the records written (default: into the Prometheus registry). */
  metrics?: RunMetrics;
  /** Bounded history (run retention, deleted jobs purged); none: records are kept forever. */
  retention?: RunRetention;
  /** The tenants' runs logs (`GET /v1/runs`); none: records are not logged per tenant. */
  tenantLog?: TenantRunLog;
}

/** How runs get their tenant's slots (src/slots/slot-broker.ts). */
export interface SlotDeps {
  router: () => ActorRouter;
  /** Slot grants outlive the run's timeout by this much (default 120 s). */
  graceMs?: number;
  /** The tenant's maximum of concurrent runs (from its record; cached by the caller). */
  tenantMaxConcurrent?: (tenantId: string) => Promise<number | undefined>;
  /** The tenant's bound on waiting runs (from its record; cached by the caller). */
  tenantMaxWaiting?: (tenantId: string) => Promise<number | undefined>;
  /** The tenant's weight for fair shares (from its record; cached by the caller). */
  tenantWeight?: (tenantId: string) => Promise<number | undefined>;
  /**
   * The tenant's weight as the node holds it now, without a read (undefined: not known yet; the
   * node reads it in the background). Carried by each offer: an offer never waits for a read.
   */
  tenantWeightNow?: (tenantId: string) => number | undefined;
  /** The node's slot broker (default: one for this registration). */
  broker?: SlotBroker;
  /**
   * Runs `fn` after `ms`, 0: on a later turn of the event loop — when the broker sends its batch
   * (default lib/clock.ts `deferOnHost`; the simulation passes its clock's timers).
   */
  defer?: (fn: () => void, ms: number) => void;
}

export interface JobShellDeps {
  log: Log;
  /** The node's clock: offers carry its time, probes and webhook retries wait on it. */
  clock: Clock;
  /** Offers, cancels and probes (dispatcher.ts, probe.ts). */
  workers: WorkerLink;
  history: HistoryDeps;
  slots: SlotDeps;
  /** Dead letters: the durable outbox, or the tenant's webhook from memory; none: logged only. */
  deadLetters?: DeadLetterDeps;
  /** Run events for the tenants' subscriptions (src/notify/run-events.ts); none: no run events. */
  runEvents?: RunEvents;
  /** Opens `task.sealed_env` for an offer (needs the cluster secret key); none: such runs wait. */
  secrets?: SecretEnvStore;
  /** Mints each offered attempt's `KAIROS_RUN_TOKEN` (run-token.ts); none: no token. */
  runTokens?: RunTokenIssuer;
  /** The tenant's egress policy for offers of `egress` tasks (dispatcher.ts); none: empty. */
  egressPolicy?: (tenantId: string) => Promise<readonly string[] | null>;
  /** Tenants' registry credentials for offers (registry-credentials.ts); none: offers carry none. */
  registryAuth?: RegistryAuthSource;
}

function slotBroker(deps: JobShellDeps): SlotBroker {
  const { slots } = deps;
  const defer = slots.defer ?? deferOnHost;
  return new SlotBroker({
    request: (to, msg) => slots.router().request(to, msg),
    defer: (fn, ms) => defer(fn, ms),
    log: deps.log,
    fleetSlots: () => deps.workers.directory.capacity(),
    nowMs: () => deps.clock.now(),
    ...(slots.tenantMaxConcurrent ? { tenantMaxConcurrent: slots.tenantMaxConcurrent } : {}),
    ...(slots.tenantMaxWaiting ? { tenantMaxWaiting: slots.tenantMaxWaiting } : {}),
    ...(slots.tenantWeight ? { tenantWeight: slots.tenantWeight } : {}),
  });
}

/** The performer of the post effects (after the state write), each through its own module. */
function postPerformer(
  cfg: JobActorConfig,
  deps: JobShellDeps,
  records: RunRecordStore,
  faults: JobFaults,
): (ctx: ShellContext, fx: JobEffect) => Promise<void> {
  const { workers, clock, log } = deps;
  const dispatch = makeDispatcher(
    cfg,
    {
      link: workers,
      clock,
      log,
      ...(deps.secrets ? { secrets: deps.secrets } : {}),
      ...(deps.runTokens ? { runTokens: deps.runTokens } : {}),
      ...(deps.egressPolicy ? { egressPolicy: deps.egressPolicy } : {}),
      ...(deps.registryAuth ? { registryAuth: deps.registryAuth } : {}),
      ...(deps.slots.tenantWeightNow ? { tenantWeight: deps.slots.tenantWeightNow } : {}),
    },
    faults,
  );
  const probe = makeProber(cfg.leaseTtlMs, workers, clock);
  const slots = deps.slots.broker ?? slotBroker(deps);
  const graceMs = deps.slots.graceMs ?? 120_000;
  const deadLetters = deps.deadLetters ?? {};
  return async function post(ctx, fx) {
    if (!ctx.stillOwner()) return; // a stale owner stays silent
    const tenantId = splitJobActorId(ctx.address.id).tenantId;
    switch (fx.kind) {
      case "acquire_slot":
        return slots.acquire(
          tenantId,
          {
            grant: fx.grant,
            job: ctx.address.id,
            ttl_ms: fx.starts_in_ms + fx.timeout_s * 1000 + graceMs,
            start_at_ms: fx.start_at_ms,
            ...(fx.throttle ? { throttle: true } : {}),
          },
          {
            granted: () => ctx.tell({ kind: "slot_granted", run_id: fx.grant }),
            throttled: (waiting, max) =>
              ctx.tell({ kind: "slot_throttled", run_id: fx.grant, waiting, max_waiting: max }),
          },
        );
      case "release_slot":
        return slots.release(tenantId, fx.grant);
      case "dispatch":
        return dispatch(ctx, fx);
      case "cancel_on_worker":
        workers.nc.publish(
          workerSubject(workers.clusterName, fx.worker, "cancel"),
          encode({ run_id: fx.run_id, fence: fx.fence }),
        );
        return;
      case "probe_worker":
        return probe(ctx, fx);
      case "dead_letter":
        return deliverDeadLetter(deadLetters, log, clock, ctx.partition, fx.record);
      case "run_ended":
        return deps.runEvents?.ended(ctx.partition, fx.record);
      case "note_run":
        return records.note(ctx, fx.record);
      case "create_run":
        await records.put(ctx, fx.record, "create");
        return;
      case "put_run":
        return;
      default:
        return assertNever(fx, "job effect");
    }
  };
}

/** The job actor's registration on a node; `faults` only in the simulation's self-tests (faults.ts). */
export function jobRegistration(
  cfg: JobActorConfig,
  deps: JobShellDeps,
  faults: JobFaults = NO_FAULTS,
): ActorRegistration {
  const { history, log } = deps;
  const metrics = history.metrics ?? new RunMetrics();
  const records = new RunRecordStore(history.runs, metrics, history.tenantLog);
  const post = postPerformer(cfg, deps, records, faults);
  const actor = makeJobActor(cfg, faults);
  return {
    definition: withRunIndex(
      history.retention ? withRetention(actor, history.retention.config) : actor,
    ),
    ...makeRecordWrites(
      history.runs,
      records,
      deps.deadLetters?.outbox !== undefined,
      log,
      // A cancelled attempt's drain bound, as `finish` sets it (run-lifecycle.ts).
      (startAtMs) => Math.max(deps.clock.now(), startAtMs) + cfg.leaseTtlMs + cfg.drainGraceMs,
    ),
    performPost(effects, ctx) {
      for (const fx of effects as (JobEffect | RetentionEffect)[]) {
        if (isRetentionEffect(fx)) {
          history.retention?.perform(ctx.partition, ctx.address.id, fx).catch((e: unknown) => {
            log("warn", `job effect ${fx.kind} failed`, { job: ctx.address.id, err: String(e) });
          });
          continue;
        }
        if (fx.kind === "acquire_slot" || fx.kind === "dispatch")
          metrics.effect(fx, () => ctx.stillOwner());
        post(ctx, fx).catch((e: unknown) => {
          log("warn", `job effect ${fx.kind} failed`, { job: ctx.address.id, err: String(e) });
          // No immediate re-ask: the run's slot_check timer asks again (SLOT_RECHECK_MS). Re-asking
          // at once after a timeout turned an overloaded tenant actor into a retry storm.
        });
      }
    },
  };
}
