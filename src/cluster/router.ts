/**
 * Sending messages to virtual actors from anywhere: the sender hashes the address to its
 * partition and makes a NATS request on `kairos.<cluster>.p.<partition>`, where only the
 * partition's owner listens. During a handoff nobody may answer (no responders), or the old owner
 * answers `not_owner`: the sender retries with capped exponential backoff until `deadlineMs`, then
 * fails with `no_owner`. A timeout is an unknown outcome and is retried too, so actor messages
 * must be idempotent (they carry request ids where it matters).
 *
 * Two planes share the partitions: actor commands on `kairos.<cluster>.p.<n>` (api and scheduler
 * identities only), and the worker plane `kairos.<cluster>.w.<n>.<worker id>`, where the owner
 * accepts only the messages a worker may send (heartbeats and completions:
 * `KairosNode.allowFromWorkers`), each naming the worker of the subject's last token. NATS
 * permissions let a worker publish on the second and not the first, and a worker identity pinned
 * to one id only under that id.
 */
import type { Bus } from "./bus.ts";
import { backoffMs, type BackoffPolicy } from "../lib/backoff.ts";
import type { Clock } from "../lib/clock.ts";
import { KairosError, isKairosError, type ErrorCode } from "../lib/errors.ts";
import type { Random } from "../lib/random.ts";
import { decode, encode } from "./codec.ts";
import { partitionOf, type ActorAddress } from "./placement.ts";

/** Wire envelope of an actor request. */
export interface ActorRequest {
  t: string;
  i: string;
  m: unknown;
}

/** Several requests for actors of one partition in one NATS message (e.g. worker heartbeats). */
export interface BatchRequest {
  b: ActorRequest[];
  /**
   * How long (ms) the owner may take before answering the items still queued as pending
   * (src/server/batch-answer.ts; default and floor 500 ms, at most 30 s). Heartbeats leave it
   * out: one item queued behind a busy actor must not hold back the acknowledgements of the
   * others. Completion reports name 1 s (at most half their wait): a report is wanted for its
   * effect, yet one slow item must not cost every item of its batch a copy (as a batch unanswered
   * within the wait would); one answered pending is copied only much later.
   */
  w?: number;
}

/**
 * One item's outcome in a batch reply. `pending`: not answered within the batch's budget, still
 * queued at its actor (src/server/batch-answer.ts) — its code, `unavailable`, is also that of an
 * item that failed (its owner's KV unavailable), which nothing holds at the owner.
 */
export type ItemResult =
  { ok: true; v: unknown } | { ok: false; e: { code: ErrorCode; message: string; pending?: true } };

export type ActorReply =
  { ok: true; v: unknown } | { ok: false; e: { code: ErrorCode; message: string; field?: string } };

const RETRY_CODES = new Set<ErrorCode>(["not_owner", "no_owner"]);
/** The pause between tries of a request that found no owner: 20 ms doubling, at most 1 s. */
const RETRY_BACKOFF: BackoffPolicy = { baseMs: 20, maxMs: 1000 };
/** Most items in one batch request. */
export const MAX_BATCH = 256;

/**
 * The sender's own node as an owner: requests for a partition it serves are handed to its actor
 * host in memory — no NATS round trip — under the wire's rules (the message and the reply copied
 * through the codec, the same retries and deadline). See `ActorRouter.request`.
 */
export interface LocalActors {
  /** Whether this node holds the partition and may act on it now (its trust window). */
  serves(partition: number): boolean;
  deliver(type: string, id: string, msg: unknown): Promise<unknown>;
}

/** A local try unanswered within its attempt's timeout (retried, as a NATS timeout is). */
class LocalTimeout extends Error {
  constructor(ms: number) {
    super(`local request timed out after ${ms} ms`);
  }
}

export interface RouterOptions {
  nc: Bus;
  clusterName: string;
  clock: Clock;
  random: Random;
  partitions: number;
  /** Per attempt. */
  attemptTimeoutMs?: number;
  /** Overall bound for one request, retries included. */
  deadlineMs?: number;
  /** `workers`: send on the worker plane (`kairos.<c>.w.<n>.<workerId>`); default `actors` (`….p.<n>`). */
  plane?: "actors" | "workers";
  /** The sending worker's id: required on the worker plane, whose subjects carry it. */
  workerId?: string;
  /** This node's actor host, for `request`s to the partitions it serves (actor plane only). */
  local?: () => LocalActors | undefined;
}

export function partitionSubject(clusterName: string, p: number): string {
  return `kairos.${clusterName}.p.${p}`;
}

/** The worker plane of partition `p` for worker `workerId`: its heartbeats and completions. */
export function workerPlaneSubject(clusterName: string, p: number, workerId: string): string {
  return `kairos.${clusterName}.w.${p}.${workerId}`;
}

/** What the owner of partition `p` subscribes to on the worker plane (every worker). */
export function workerPlaneWildcard(clusterName: string, p: number): string {
  return `kairos.${clusterName}.w.${p}.*`;
}

/** The worker id a worker-plane subject names (its last token). */
export function workerPlaneSender(subject: string): string {
  return subject.slice(subject.lastIndexOf(".") + 1);
}

export class ActorRouter {
  readonly #o: Required<Omit<RouterOptions, "workerId" | "local">>;
  readonly #local: (() => LocalActors | undefined) | undefined;
  readonly #subject: (clusterName: string, p: number) => string;

  constructor(o: RouterOptions) {
    const { local, workerId, ...rest } = o;
    this.#o = { attemptTimeoutMs: 10_000, deadlineMs: 15_000, plane: "actors", ...rest };
    this.#local = this.#o.plane === "actors" ? local : undefined;
    if (this.#o.plane === "workers") {
      if (workerId === undefined)
        throw new KairosError("invalid_argument", "a worker-plane router needs the worker's id", {
          field: "workerId",
        });
      this.#subject = (c, p) => workerPlaneSubject(c, p, workerId);
    } else {
      this.#subject = partitionSubject;
    }
  }

  /** The sender's wall clock (a command stamped with its first send, e.g. run-now). */
  now(): number {
    return this.#o.clock.now();
  }

  /** The clock the router's waits run on (for callers pacing their own retries alike). */
  get clock(): Clock {
    return this.#o.clock;
  }

  async request<R = unknown>(
    addr: ActorAddress,
    msg: unknown,
    opts: { deadlineMs?: number } = {},
  ): Promise<R> {
    const { nc, clock } = this.#o;
    const p = partitionOf(addr, this.#o.partitions);
    const subject = this.#subject(this.#o.clusterName, p);
    const body = encode({ t: addr.type, i: addr.id, m: msg } satisfies ActorRequest);
    const deadline = clock.now() + (opts.deadlineMs ?? this.#o.deadlineMs);
    let attempt = 0;
    let last = "no attempt made";
    for (;;) {
      const left = deadline - clock.now();
      if (left <= 0) break;
      try {
        const timeout = Math.min(this.#o.attemptTimeoutMs, left);
        const local = this.#local?.();
        const reply =
          local?.serves(p) === true
            ? await this.#deliverLocally(local, body, timeout)
            : decode<ActorReply>((await nc.request(subject, body, { timeout })).data);
        if (reply.ok) return reply.v as R;
        if (!RETRY_CODES.has(reply.e.code)) {
          throw new KairosError(
            reply.e.code,
            reply.e.message,
            reply.e.field === undefined ? {} : { field: reply.e.field },
          );
        }
        last = reply.e.message;
      } catch (e) {
        if (e instanceof KairosError) throw e;
        last = e instanceof Error ? e.message : String(e);
        if (nc.isClosed())
          throw new KairosError("unavailable", `NATS connection closed: ${last}`, { cause: e });
      }
      const backoff = backoffMs(attempt++, {
        ...RETRY_BACKOFF,
        jitter: { random: this.#o.random, min: 0.5 },
      });
      await new Promise<void>((r) =>
        clock.setTimer(Math.min(backoff, Math.max(0, deadline - clock.now())), r),
      );
    }
    throw new KairosError(
      "no_owner",
      `no owner answered for ${addr.type}/${addr.id} (partition ${p}) within the deadline: ${last}`,
    );
  }

  /**
   * One try of a request on this node's own host: the reply as the partition's responder would
   * send it (partition-responder.ts), copied through the codec like the message, so neither side
   * shares an object with the other. No answer within `timeoutMs` is a timeout, as on the wire
   * (the turn goes on; a retry queues a copy).
   */
  async #deliverLocally(
    local: LocalActors,
    body: Uint8Array,
    timeoutMs: number,
  ): Promise<ActorReply> {
    const req = decode<ActorRequest>(body);
    let cancel: (() => void) | undefined;
    // The timeout's Error is made only if it fires (a stack trace a request is a visible cost).
    const expired = new Promise<never>((_, reject) => {
      cancel = this.#o.clock.setTimer(timeoutMs, () => reject(new LocalTimeout(timeoutMs)));
    });
    try {
      const v = await Promise.race([local.deliver(req.t, req.i, req.m), expired]);
      return decode<ActorReply>(encode({ ok: true, v } satisfies ActorReply));
    } catch (e) {
      if (e instanceof LocalTimeout) throw e;
      if (isKairosError(e)) return { ok: false, e: e.toJSON() };
      return { ok: false, e: { code: "internal", message: "internal error" } };
    } finally {
      cancel?.();
    }
  }

  /**
   * Sends many messages with one NATS request per partition (bounded to `MAX_BATCH` items each)
   * and returns one result per item, in input order. A partition that does not answer within
   * `deadlineMs` yields `no_owner` for its items; callers retry on their next round. `budgetMs`:
   * how long the owner may take before answering items still queued as pending (`BatchRequest.w`).
   * `attemptMs`: how long one request waits for its answer before it is sent again within the
   * deadline (default the router's `attemptTimeoutMs`); a caller that sends its own copies (the
   * worker's completion outbox) names its whole deadline, so that no copy goes unseen by it.
   */
  async requestMany(
    items: readonly { to: ActorAddress; msg: unknown }[],
    opts: { deadlineMs?: number; budgetMs?: number; attemptMs?: number } = {},
  ): Promise<ItemResult[]> {
    const { nc, clock } = this.#o;
    const results: ItemResult[] = new Array<ItemResult>(items.length);
    const groups = new Map<number, number[]>();
    items.forEach((it, i) => {
      const p = partitionOf(it.to, this.#o.partitions);
      const g = groups.get(p);
      if (g) g.push(i);
      else groups.set(p, [i]);
    });
    const deadline = clock.now() + (opts.deadlineMs ?? this.#o.deadlineMs);
    await Promise.all(
      [...groups].flatMap(([p, idx]) => {
        const chunks: number[][] = [];
        for (let i = 0; i < idx.length; i += MAX_BATCH) chunks.push(idx.slice(i, i + MAX_BATCH));
        return chunks.map(async (chunk) => {
          const b = chunk.map((i) => ({
            t: items[i]!.to.type,
            i: items[i]!.to.id,
            m: items[i]!.msg,
          }));
          const body = encode(
            (opts.budgetMs === undefined ? { b } : { b, w: opts.budgetMs }) satisfies BatchRequest,
          );
          let last = "no attempt made";
          for (let attempt = 0; clock.now() < deadline; attempt++) {
            try {
              const m = await nc.request(this.#subject(this.#o.clusterName, p), body, {
                timeout: Math.min(
                  opts.attemptMs ?? this.#o.attemptTimeoutMs,
                  Math.max(1, deadline - clock.now()),
                ),
              });
              const reply = decode<ActorReply>(m.data);
              if (reply.ok) {
                const out = reply.v as ItemResult[];
                chunk.forEach(
                  (i, k) =>
                    (results[i] = out[k] ?? {
                      ok: false,
                      e: { code: "internal", message: "missing batch item" },
                    }),
                );
                return;
              }
              last = reply.e.message;
              if (!RETRY_CODES.has(reply.e.code)) break;
            } catch (e) {
              last = e instanceof Error ? e.message : String(e);
              if (nc.isClosed()) break;
            }
            const backoff = backoffMs(attempt, RETRY_BACKOFF);
            await new Promise<void>((r) =>
              clock.setTimer(Math.min(backoff, Math.max(0, deadline - clock.now())), r),
            );
          }
          for (const i of chunk)
            results[i] = { ok: false, e: { code: "no_owner", message: `partition ${p}: ${last}` } };
        });
      }),
    );
    return results;
  }
}
