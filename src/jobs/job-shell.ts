/**
 * The job actor's shell: performs the effects its pure core decides (job-actor.ts), each through
 * the module of its concern — `put_run` (run-record-store.ts; dead-letter keys after a dead
 * letter's record), `acquire_slot`/`release_slot` (slot-broker.ts), `dispatch` (dispatcher.ts),
 * `cancel_on_worker`, `probe_worker` (answer back as `probe_answer`), `note_run` (metrics only),
 * `dead_letter` (dead-letters.ts), `write_run_index` (run-index-store.ts), and with retention
 * `prune_runs`/`purge_job` (run-retention.ts). Run metrics derive from what is written
 * (run-metrics.ts).
 *
 * Pitfalls: every network effect first checks that this node still owns the actor
 * (`stillOwner`), so a stale owner stays silent. Post effects run concurrently and unawaited; a
 * failed one is logged, not retried here — the core's timers ask again.
 */
import type { Bus } from "../cluster/bus.ts";
import type { ActorRegistration, ShellContext } from "../actors/host.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { KvStore } from "../cluster/kv.ts";
import type { ActorRouter } from "../cluster/router.ts";
import { assertNever } from "../lib/assert.ts";
import { deferOnHost } from "../lib/clock.ts";
import { KairosError } from "../lib/errors.ts";
import { workerSubject, type ProbeReply } from "../protocol/worker.ts";
import { deliverDeadLetter, isDeadLetter, recordDeadLetter, type DeadLetterOutbox } from "../notify/dead-letters.ts";
import { makeDispatcher } from "./dispatcher.ts";
import { TENANT_ACTOR, runKey, splitJobActorId } from "../protocol/ids.ts";
import { makeJobActor } from "./job-actor.ts";
import { type JobActorConfig, type JobEffect, type JobMsg } from "./job-types.ts";
import { isRetentionEffect, type RetentionEffect } from "../history/retention.ts";
import { isRunIndexEffect, type RunIndexEffect } from "../history/run-index.ts";
import { withRetention, withRunIndex } from "./with-history.ts";
import { writeRunIndexChunk } from "../history/run-index-store.ts";
import { RunMetrics } from "../history/run-metrics.ts";
import { RunRecordStore } from "../history/run-record-store.ts";
import { decodeRunRecord, encodeRunRecord } from "../history/run-record.ts";
import { activeRunView, type JobState } from "./job-state.ts";
import { TERMINAL } from "../protocol/model.ts";
import type { RunRetention } from "../history/run-retention.ts";
import type { SecretEnvStore } from "../secrets/secret-env.ts";
import { SlotBroker } from "../slots/slot-broker.ts";
import type { WebhookTarget } from "../notify/webhook.ts";
import type { WorkerDirectory } from "../slots/worker-directory.ts";
import { NO_FAULTS, type JobFaults } from "./faults.ts";

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
  /** Wall-clock seconds and a sleep, for webhook signatures and retries (the sleep also spaces a probe's asks). */
  nowS?: () => number;
  /** Now in ms (the slot broker tells urgent asks by it: a run due within GRANT_GATHER_LEAD_MS). */
  nowMs?: () => number;
  sleep?: (ms: number) => Promise<void>;
  /** Counts run transitions from the records written (default: into the Prometheus registry). */
  runMetrics?: RunMetrics;
  /** Bounded history (run retention, deleted jobs purged); none: records are kept forever. */
  retention?: RunRetention;
  /** The durable dead-letter list and webhook outbox (dead-letters.ts); without it, in memory. */
  deadLetters?: DeadLetterOutbox;
  /** The node's slot broker (default: one for this registration, see slot-broker.ts). */
  slots?: SlotBroker;
  /** Runs `fn` after `ms`, 0: on a later turn of the event loop (default lib/clock.ts `deferOnHost`; the simulation's clock). */
  defer?: (fn: () => void, ms: number) => void;
  /** Opens `task.sealed_env` for an offer (needs the cluster secret key); none: such runs wait. */
  secrets?: SecretEnvStore;
}

/**
 * How long a probe waits for its worker's answer (at most half the lease TTL): the worker answers
 * from memory, but a worker swamped by a burst reads it late. No answer: the actor asks again,
 * up to run-lifecycle.ts MAX_UNANSWERED_PROBES in a row, then the lease lapses.
 */
export const PROBE_TIMEOUT_MS = 5_000;

/** How many times a probe asks a worker that answers "no responders" yet is not known to have stopped advertising (spread over PROBE_TIMEOUT_MS). */
export const PROBE_NO_RESPONDER_ASKS = 5;

/** Whether a request failed for want of any subscriber (NATS 503; the simulation bus says the same). */
function isNoResponders(e: unknown): boolean {
  if (!(e instanceof Error)) return false;
  const cause = (e as { cause?: unknown }).cause;
  return /no responders/i.test(e.message) || (cause instanceof Error && cause.name === "NoRespondersError");
}

/** The job actor's registration on a node; `faults` only in the simulation's self-tests (faults.ts). */
export function jobRegistration(cfg: JobActorConfig, deps: JobShellDeps, faults: JobFaults = NO_FAULTS): ActorRegistration {
  const metrics = deps.runMetrics ?? new RunMetrics();
  const records = new RunRecordStore(deps.runs, metrics);
  const dispatch = makeDispatcher(cfg, deps, faults);
  /** Runs `fn` after `ms` on the shell's clock (the simulation's, in the simulation). */
  const defer = deps.defer ?? deferOnHost;
  const slots = deps.slots ?? new SlotBroker({
    request: (to, msg) => deps.router().request(to, msg),
    defer: (fn, ms) => defer(fn, ms),
    log: deps.log,
    fleetSlots: () => deps.workers.capacity(),
    ...(deps.nowMs ? { nowMs: deps.nowMs } : {}),
    ...(deps.tenantMaxConcurrent ? { tenantMaxConcurrent: deps.tenantMaxConcurrent } : {}),
    ...(deps.tenantWeight ? { tenantWeight: deps.tenantWeight } : {}),
  });

  const pause = (ms: number): Promise<void> => deps.sleep?.(ms) ?? new Promise((resolve) => defer(resolve, ms));

  /** One ask of a probe: the worker's reply, or why there is none. */
  async function askOnce(fx: Extract<JobEffect, { kind: "probe_worker" }>, timeoutMs: number): Promise<ProbeReply | "no_responders" | "no_answer"> {
    try {
      const m = await deps.nc.request(workerSubject(deps.clusterName, fx.worker, "probe"), encode({ run_id: fx.run_id, attempt: fx.attempt, fence: fx.fence }), { timeout: timeoutMs });
      return decode<ProbeReply>(m.data);
    } catch (e) {
      return isNoResponders(e) ? "no_responders" : "no_answer"; // a timeout: frozen, cut off or swamped
    }
  }

  /**
   * Asks a worker what became of an attempt, within PROBE_TIMEOUT_MS (at most half the lease
   * TTL, so an answer lands before the actor's fallback asks again). "No responders" means its
   * process is gone only once the directory knows it stopped advertising; from one that still
   * advertises (a live worker between two connections, its subscriptions not back yet — taken
   * for gone, its lease lapsed at once and an attempt never heard to start was presumed
   * unstarted: run again if it had run) it is asked again, PROBE_NO_RESPONDER_ASKS times spread
   * over the budget, and then it is no answer (the actor asks again, MAX_UNANSWERED_PROBES).
   */
  async function probe(ctx: ShellContext, fx: Extract<JobEffect, { kind: "probe_worker" }>): Promise<void> {
    const budgetMs = Math.min(PROBE_TIMEOUT_MS, cfg.leaseTtlMs / 2);
    const gapMs = budgetMs / PROBE_NO_RESPONDER_ASKS;
    let reply: ProbeReply | null = null;
    let gone = false;
    for (let asked = 0; asked < PROBE_NO_RESPONDER_ASKS && ctx.stillOwner(); asked++) {
      if (asked > 0) await pause(gapMs);
      const r = await askOnce(fx, budgetMs - asked * gapMs);
      if (r === "no_answer") break;
      if (r !== "no_responders") {
        reply = r;
        break;
      }
      if (deps.workers.stoppedAdvertising(fx.worker)) {
        gone = true;
        break;
      }
    }
    // A tell refused (the mailbox full) is not retried here: the lease's fallback timer asks again.
    ctx.tell({ kind: "probe_answer", run_id: fx.run_id, fence: fx.fence, worker: fx.worker, reply, ...(gone ? { gone: true as const } : {}) });
  }

  async function post(ctx: ShellContext, fx: JobEffect): Promise<void> {
    if (!ctx.stillOwner()) return; // a stale owner stays silent
    const tenant = { type: TENANT_ACTOR, id: splitJobActorId(ctx.address.id).tenantId };
    switch (fx.kind) {
      case "acquire_slot":
        return slots.acquire(tenant.id, { grant: fx.grant, job: ctx.address.id, ttl_ms: fx.starts_in_ms + fx.timeout_s * 1000 + (deps.slotGraceMs ?? 120_000), start_at_ms: fx.start_at_ms }, () => ctx.tell({ kind: "slot_granted", run_id: fx.grant }));
      case "release_slot":
        return slots.release(tenant.id, fx.grant);
      case "dispatch":
        return dispatch(ctx, fx);
      case "cancel_on_worker":
        deps.nc.publish(workerSubject(deps.clusterName, fx.worker, "cancel"), encode({ run_id: fx.run_id, fence: fx.fence }));
        return;
      case "probe_worker":
        return probe(ctx, fx);
      case "dead_letter":
        return deliverDeadLetter(deps, ctx.partition, fx.record);
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
  }

  return {
    definition: withRunIndex(deps.retention ? withRetention(makeJobActor(cfg, faults), deps.retention.config) : makeJobActor(cfg, faults)),
    /**
     * A job state read back may still list runs whose end was a deferred change (`finish`): the
     * terminal record was written, the state not — and retention may have pruned that record
     * since (the state of a one-shot job is never written again). One read per active run finds
     * them: a terminal record or none means ended; they are dropped (the state is written with
     * the next write). Without this a completed run would be
     * given a fresh lease and, its worker long gone, run again when the lease expired.
     */
    async reconcile(raw, at) {
      const s = raw as JobState;
      if (!s.job || s.runs.length === 0) return s;
      const { tenantId, jobId } = splitJobActorId(at.id);
      const ended = new Set<string>();
      await Promise.all(s.runs.map(async (r) => {
        const key = runKey(at.partition, tenantId, jobId, r.run_id);
        const e = await deps.runs.get(key);
        if (!e && r.recorded_after) {
          // Written after the state (`create_run`), and that write did not happen: the state write
          // landed unseen (a timeout) or the node stopped. The run is live; write its record now.
          // Stamped epoch 0: any later write of an owner may replace it.
          await deps.runs.create(key, encodeRunRecord(activeRunView(s.job!, r), 0));
          return;
        }
        // No record: it ended and retention pruned it (a stored state lists a run only after its
        // record was created, and retention prunes terminal records only; once the end is
        // deferred, the state may list the run long after — one-shot jobs).
        if (!e || TERMINAL.has(decodeRunRecord(e.value).record.status)) ended.add(r.run_id);
      }));
      if (ended.size === 0) return s;
      deps.log("info", "runs ended before the job state was written: dropped on load", { job: at.id, runs: [...ended] });
      return { ...s, runs: s.runs.filter((r) => !ended.has(r.run_id)) };
    },
    async perform(pre, ctx) {
      const followUps: JobMsg[] = [];
      for (const fx of pre as (JobEffect | RunIndexEffect)[]) {
        // Re-checked before each write: a long series (catch-up records) must not outlive ownership.
        if (!ctx.stillOwner()) throw new KairosError("not_owner", `${ctx.address.type}/${ctx.address.id}: no longer the owner`);
        if (isRunIndexEffect(fx)) {
          await writeRunIndexChunk(deps.runs, ctx, fx);
          continue;
        }
        if (fx.kind === "put_run" && (await records.put(ctx, fx.record, fx.mode)) === "ended") {
          followUps.push({ kind: "already_ended", run_id: fx.record.run_id } satisfies JobMsg);
        }
        if (fx.kind === "put_run" && fx.mode === "update" && deps.deadLetters && isDeadLetter(fx.record)) await recordDeadLetter(deps.runs, ctx.partition, fx.record);
      }
      return followUps;
    },
    performPost(effects, ctx) {
      for (const fx of effects as (JobEffect | RetentionEffect)[]) {
        if (isRetentionEffect(fx)) {
          deps.retention?.perform(ctx.partition, ctx.address.id, fx).catch((e: unknown) => {
            deps.log("warn", `job effect ${fx.kind} failed`, { job: ctx.address.id, err: String(e) });
          });
          continue;
        }
        if (fx.kind === "acquire_slot" || fx.kind === "dispatch") metrics.effect(fx, () => ctx.stillOwner());
        post(ctx, fx).catch((e: unknown) => {
          deps.log("warn", `job effect ${fx.kind} failed`, { job: ctx.address.id, err: String(e) });
          // No immediate re-ask: the run's slot_check timer asks again (SLOT_RECHECK_MS). Re-asking
          // at once after a timeout turned an overloaded tenant actor into a retry storm.
        });
      }
    },
  };
}
