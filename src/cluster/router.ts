/**
 * Sending messages to virtual actors from anywhere: the sender hashes the address to its
 * partition and makes a NATS request on `kairos.<cluster>.p.<partition>`, where only the
 * partition's owner listens. During a handoff nobody may answer (no responders), or the old owner
 * answers `not_owner`: the sender retries with capped exponential backoff until `deadlineMs`, then
 * fails with `no_owner`. A timeout is an unknown outcome and is retried too, so actor messages
 * must be idempotent (they carry request ids where it matters).
 */
import type { NatsConnection } from "@nats-io/transport-node";
import type { Clock } from "../lib/clock.ts";
import { KairosError, type ErrorCode } from "../lib/errors.ts";
import type { Random } from "../lib/random.ts";
import { decode, encode } from "./codec.ts";
import { partitionOf, type ActorAddress } from "./placement.ts";

/** Wire envelope of an actor request. */
export interface ActorRequest {
  t: string;
  i: string;
  m: unknown;
}

export type ActorReply =
  | { ok: true; v: unknown }
  | { ok: false; e: { code: ErrorCode; message: string; field?: string } };

const RETRY_CODES = new Set<ErrorCode>(["not_owner", "no_owner"]);

export interface RouterOptions {
  nc: NatsConnection;
  clusterName: string;
  clock: Clock;
  random: Random;
  partitions: number;
  /** Per attempt. */
  attemptTimeoutMs?: number;
  /** Overall bound for one request, retries included. */
  deadlineMs?: number;
}

export function partitionSubject(clusterName: string, p: number): string {
  return `kairos.${clusterName}.p.${p}`;
}

export class ActorRouter {
  readonly #o: Required<RouterOptions>;

  constructor(o: RouterOptions) {
    this.#o = { attemptTimeoutMs: 3000, deadlineMs: 15_000, ...o };
  }

  async request<R = unknown>(addr: ActorAddress, msg: unknown, opts: { deadlineMs?: number } = {}): Promise<R> {
    const { nc, clock } = this.#o;
    const p = partitionOf(addr, this.#o.partitions);
    const subject = partitionSubject(this.#o.clusterName, p);
    const body = encode({ t: addr.type, i: addr.id, m: msg } satisfies ActorRequest);
    const deadline = clock.now() + (opts.deadlineMs ?? this.#o.deadlineMs);
    let attempt = 0;
    let last = "no attempt made";
    for (;;) {
      const left = deadline - clock.now();
      if (left <= 0) break;
      try {
        const m = await nc.request(subject, body, { timeout: Math.min(this.#o.attemptTimeoutMs, left) });
        const reply = decode<ActorReply>(m.data);
        if (reply.ok) return reply.v as R;
        if (!RETRY_CODES.has(reply.e.code)) {
          throw new KairosError(reply.e.code, reply.e.message, reply.e.field === undefined ? {} : { field: reply.e.field });
        }
        last = reply.e.message;
      } catch (e) {
        if (e instanceof KairosError) throw e;
        last = e instanceof Error ? e.message : String(e);
        if (nc.isClosed()) throw new KairosError("unavailable", `NATS connection closed: ${last}`, { cause: e });
      }
      const backoff = Math.min(1000, 20 * 2 ** Math.min(attempt++, 6));
      await new Promise<void>((r) => clock.setTimer(Math.min(backoff * (0.5 + this.#o.random.next()), Math.max(0, deadline - clock.now())), r));
    }
    throw new KairosError("no_owner", `no owner answered for ${addr.type}/${addr.id} (partition ${p}) within the deadline: ${last}`);
  }
}
