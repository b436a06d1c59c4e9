/**
 * A counter actor, used by the fencing and churn tests and the actor benchmarks. Increments carry
 * a request id; the counter remembers the last `DEDUPE_WINDOW` ids so a retried increment (after
 * a timeout or a handoff) is acknowledged without being applied twice.
 */
import { KairosError } from "../lib/errors.ts";
import type { ActorDefinition } from "./actor.ts";

export const DEDUPE_WINDOW = 256;

export interface CounterState {
  readonly value: number;
  /** Recent request ids, oldest first (bounded). */
  readonly recent: readonly string[];
}

export type CounterMsg = { kind: "inc"; by: number; reqId: string } | { kind: "get" };
export type CounterReply = { value: number; applied?: boolean };

export const counterActor: ActorDefinition<CounterState, CounterMsg, CounterReply> = {
  type: "counter",
  initialState: () => ({ value: 0, recent: [] }),
  parse(raw) {
    const m = raw as Partial<{ kind: string; by: unknown; reqId: unknown }> | null;
    if (m?.kind === "get") return { kind: "get" };
    if (
      m?.kind === "inc" &&
      typeof m.by === "number" &&
      Number.isInteger(m.by) &&
      typeof m.reqId === "string" &&
      m.reqId.length > 0
    ) {
      return { kind: "inc", by: m.by, reqId: m.reqId };
    }
    throw new KairosError(
      "invalid_argument",
      "counter message must be {kind:'get'} or {kind:'inc', by:int, reqId:string}",
    );
  },
  receive(state, msg) {
    switch (msg.kind) {
      case "get":
        return { state, reply: { value: state.value } };
      case "inc": {
        if (state.recent.includes(msg.reqId))
          return { state, reply: { value: state.value, applied: false } };
        const recent = [...state.recent, msg.reqId];
        if (recent.length > DEDUPE_WINDOW) recent.splice(0, recent.length - DEDUPE_WINDOW);
        const next = { value: state.value + msg.by, recent };
        return { state: next, reply: { value: next.value, applied: true } };
      }
    }
  },
};
