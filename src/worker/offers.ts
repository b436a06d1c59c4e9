/**
 * What the schedulers send a worker: offers (`…worker.<id>.start`, a claim), cancels and probes.
 * An offer or probe whose reply subject is not a scheduler identity's inbox is dropped unanswered
 * (reply-guard.ts). A probe (from the owner of a lease that fell silent) is answered with the
 * truth here: an attempt held but not started is dropped by it (`not_started`: it never starts
 * after that answer), a running one answers `running`, an ended one its completion; attempts
 * gone from here are answered from the worker's memory of them (attempt-memory.ts). An offer
 * takes a free slot, or — every slot taken — a place in the prefetch queue (slot-ledger.ts); else
 * it is refused ("no free slot").
 */
import type { BusMsg, BusSubscription } from "../cluster/bus.ts";
import { decode, encode } from "../cluster/codec.ts";
import { replyRefusal } from "../cluster/reply-guard.ts";
import { countBusRefusal } from "../metrics/index.ts";
import { MAX_INSTANT_MS } from "../schedule/index.ts";
import {
  workerSubject,
  COMPACT_JWS,
  MAX_REGISTRY_AUTH_CHARS,
  MAX_RUN_TOKEN_CHARS,
  type CancelRequest,
  type ProbeReply,
  type ProbeRequest,
  type StartReply,
  type StartRequest,
} from "../protocol/worker.ts";
import type { WorkerCore } from "./core.ts";
import { attemptKey, fencedKey, newLease } from "./lease.ts";
import { ON_TIME_MS } from "./slot-ledger.ts";

export class Offers {
  readonly #c: WorkerCore;

  constructor(c: WorkerCore) {
    this.#c = c;
  }

  /** The worker's three subscriptions: start (offers), cancel and probe. */
  subscribe(): BusSubscription[] {
    const { nc, clusterName, workerId } = this.#c.o;
    return [
      nc.subscribe(workerSubject(clusterName, workerId, "start"), {
        callback: (_e, m) => {
          if (this.#refusesReply(m)) return;
          m.respond(encode(this.#offer(decode<StartRequest>(m.data))));
        },
      }),
      nc.subscribe(workerSubject(clusterName, workerId, "cancel"), {
        // Only on its own subject: a JetStream push consumer delivers stored messages under their
        // own subject (`$KV.…`) to whatever subject its creator chose (start and probe need a
        // scheduler's inbox to answer, which such a delivery never has: `#refusesReply`).
        callback: (e, m) => {
          if (e) return;
          if (m.subject === workerSubject(clusterName, workerId, "cancel"))
            this.#cancel(decode<CancelRequest>(m.data));
          else countBusRefusal("worker", "subject");
        },
      }),
      nc.subscribe(workerSubject(clusterName, workerId, "probe"), {
        callback: (_e, m) => {
          if (this.#refusesReply(m)) return;
          m.respond(encode(this.#probe(decode<ProbeRequest>(m.data))));
        },
      }),
    ];
  }

  /**
   * An offer or probe whose reply subject is not a scheduler identity's inbox is dropped before it
   * is looked at (reply-guard.ts): no claim, no answer published where the sender chose.
   */
  #refusesReply(m: BusMsg): boolean {
    const { o } = this.#c;
    const refused = replyRefusal(m.reply, { kind: "scheduler" }, o.inboxes ?? "per_user");
    if (!refused) return false;
    countBusRefusal("worker", refused.reason);
    o.log(
      "warn",
      "offer or probe dropped unanswered: its reply subject is not a scheduler's inbox",
      { reason: refused.reason, detail: refused.detail, subject: m.subject },
    );
    o.onRefused?.({ ...refused, subject: m.subject });
    return true;
  }

  /**
   * What became of an attempt, for its owner whose lease fell silent (see the module header).
   * Answered from memory, at once: an attempt held and not started is dropped now.
   */
  #probe(p: ProbeRequest): ProbeReply {
    const reply = this.#probeAnswer(p);
    // Counted by answer (`probe_started`: a result lost; `probe_dropped`: held, dropped by the
    // probe).
    this.#c.o.onEvent?.({ type: `probe_${reply.state}`, run_id: p.run_id, attempt: p.attempt });
    return reply;
  }

  #probeAnswer(p: ProbeRequest): ProbeReply {
    const c = this.#c;
    const { memory } = c.table;
    const key = attemptKey(p.run_id, p.attempt);
    const l = c.table.leases.get(key);
    if (l && l.req.fence === p.fence && !l.lost) {
      if (l.completion) return { state: "ended", completion: l.completion };
      if (l.execution) return { state: "running" };
      l.lost = true; // never started here, and now never will
      c.table.drop(l);
      c.o.onEvent?.({ type: "probe_dropped", run_id: p.run_id, attempt: p.attempt });
      c.leaseGone();
      return { state: "not_started" };
    }
    // Cancelled while it ran, its task still dying (a kill's grace): running — its owner holds the
    // tenant's slot until the report of its end (run-lifecycle.ts `endStopped`).
    if (l && l.req.fence === p.fence && l.cancelled && l.execution && !l.completion)
      return { state: "running" };
    const k = fencedKey(key, p.fence);
    // Killed at once, its result not in yet: asked again a TTL later (src/runs/run-messages.ts
    // `onProbeAnswer`).
    if (memory.killing.has(k)) return { state: "running" };
    const given = memory.completion(k);
    if (given) return { state: "ended", completion: given };
    const started = memory.forgotten.get(k);
    return started === undefined
      ? { state: "unknown" }
      : { state: started ? "started" : "not_started" };
  }

  #offer(req: StartRequest): StartReply {
    const c = this.#c;
    const { o, table } = c;
    if (c.stopping || c.draining)
      return { accepted: false, reason: c.draining ? "draining" : "stopping" };
    // (The identity made at the offer formats scheduled_for: a malformed time is refused here, not
    // thrown.)
    if (
      !Number.isFinite(req.start_at_ms) ||
      !Number.isFinite(req.scheduled_for_ms) ||
      Math.abs(req.scheduled_for_ms) > MAX_INSTANT_MS
    ) {
      return {
        accepted: false,
        reason:
          "malformed offer: scheduled_for_ms and start_at_ms must be finite times (within ±8.64e15 ms)",
      };
    }
    if (
      req.owner_now_ms !== undefined &&
      !(Number.isFinite(req.owner_now_ms) && Math.abs(req.owner_now_ms) <= MAX_INSTANT_MS)
    ) {
      return {
        accepted: false,
        reason: "malformed offer: owner_now_ms must be a finite time (within ±8.64e15 ms)",
      };
    }
    if (
      req.run_token !== undefined &&
      !(
        typeof req.run_token === "string" &&
        req.run_token.length <= MAX_RUN_TOKEN_CHARS &&
        COMPACT_JWS.test(req.run_token)
      )
    ) {
      return {
        accepted: false,
        reason: `malformed offer: run_token must be a compact JWS of at most ${MAX_RUN_TOKEN_CHARS} characters`,
      };
    }
    if (req.registry_auth !== undefined && !validRegistryAuth(req.registry_auth)) {
      return {
        accepted: false,
        reason:
          "malformed offer: registry_auth must be {registry, username, password}, strings within their bounds",
      };
    }
    const k = attemptKey(req.run_id, req.attempt);
    // A late copy of an offer this worker has already let go (dropped by a probe, say) must not
    // bring it back: it answered its owner that the attempt will never run here.
    const fenced = fencedKey(k, req.fence);
    if (table.memory.forgotten.has(fenced) || table.memory.completion(fenced) !== undefined)
      return { accepted: false, reason: "attempt already gone from here" };
    const existing = table.leases.get(k);
    if (existing) {
      if (existing.req.fence === req.fence) return { accepted: true };
      if (existing.execution || existing.completion)
        return { accepted: false, reason: "attempt already running here" };
      // A newer offer of the same attempt supersedes one that never started (its fence is dead).
      existing.lost = true;
      table.drop(existing);
    }
    if (table.size >= c.leaseLimit) return { accepted: false, reason: "no free slot" };
    const lease = newLease(req, k, o.clock.monoMs(), o.workerId);
    // A slot, or (every slot taken) the prefetch queue: it starts the moment a slot frees after
    // its start instant — before the attempts that came late if it comes on time by its owner's
    // clock (slot-ledger.ts).
    const onTime = req.start_at_ms >= (req.owner_now_ms ?? o.clock.now()) - ON_TIME_MS;
    if (table.slots.admit(lease, onTime) === "full")
      return { accepted: false, reason: "no free slot" };
    table.add(lease);
    c.parts.starts.enqueueStart(lease, req.start_at_ms);
    o.onEvent?.({ type: "accepted", run_id: req.run_id, attempt: req.attempt });
    c.parts.beats.beatSoon(); // the acknowledged heartbeat that confirms the claim
    return { accepted: true };
  }

  #cancel(req: CancelRequest): void {
    const c = this.#c;
    for (const l of [...c.table.leases.values()]) {
      // (An attempt that already ended is reported by its completion, which ends the drain too.)
      if (l.req.run_id !== req.run_id || l.req.fence !== req.fence || l.lost || l.completion)
        continue;
      l.lost = true; // no more heartbeats, never started from here on
      l.cancelled = true;
      // Never started: nothing to wait for (its slot is free now). Running: its slot stays taken
      // until the task is gone.
      if (!l.execution) {
        c.table.freeSlot(l);
        void c.parts.outbox.reportCancelled(l, null);
      } else void l.execution.kill("cancelled by the scheduler", { immediate: false });
    }
  }
}

/** An offer's `registry_auth` has its shape: three non-empty strings within their bounds. */
function validRegistryAuth(a: unknown): boolean {
  if (typeof a !== "object" || a === null) return false;
  const r = a as Record<string, unknown>;
  return (["registry", "username", "password"] as const).every(
    (f) => typeof r[f] === "string" && r[f].length > 0 && r[f].length <= MAX_REGISTRY_AUTH_CHARS[f],
  );
}
