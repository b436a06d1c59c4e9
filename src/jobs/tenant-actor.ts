/**
 * The tenant actor's pure core: one per tenant, it hands out worker slots to the tenant's job
 * actors within the tenant's maximum of concurrent runs. Requests beyond the maximum wait in a
 * bounded FIFO and are granted (by a message to the job actor) as slots come back. A grant
 * expires after the run's timeout plus a grace, so a job actor that vanished cannot leak slots.
 *
 * The state is soft (never written to KV): grants are leases that expire, and job actors whose
 * runs wait for a slot ask again every `SLOT_RECHECK_MS` (the acquire is idempotent), so a tenant
 * actor that moved to another node rebuilds its view within that time. Persisting it would cost
 * a KV write of the whole grant table per acquire — the bottleneck of a burst.
 *
 * Weighted fair sharing between tenants builds on this same path (a later issue): the pool
 * will be shared max-min fairly by weight across tenant actors.
 */
import type { ActorDefinition, HostEffect } from "../actors/actor.ts";
import { JOB_ACTOR, TENANT_ACTOR } from "./ids.ts";

export interface TenantState {
  max_concurrent: number;
  /** run_id → grant expiry (ms). */
  running: Record<string, number>;
  waiting: { run_id: string; job: string; ttl_ms: number }[];
}

export type TenantMsg =
  | { kind: "acquire"; run_id: string; job: string; ttl_ms: number; max_concurrent?: number }
  | { kind: "release"; run_id: string }
  | { kind: "set_quota"; max_concurrent: number }
  | { kind: "expire" }
  | { kind: "status" };

export type TenantReply = { granted: boolean } | { running: number; waiting: number; max_concurrent: number } | null;

export const WAITING_LIMIT = 100_000;

export function makeTenantActor(defaultMaxConcurrent = 100): ActorDefinition<TenantState, TenantMsg, TenantReply> {
  return {
    type: TENANT_ACTOR,
    persist: false,
    initialState: () => ({ max_concurrent: defaultMaxConcurrent, running: {}, waiting: [] }),
    receive(state, msg, ctx) {
      const now = ctx.nowMs;
      const running = Object.fromEntries(Object.entries(state.running).filter(([, exp]) => exp > now));
      let waiting = state.waiting;
      let max = state.max_concurrent;
      const effects: HostEffect<TenantMsg>[] = [];
      let reply: TenantReply = null;
      let fail: { code: "overloaded"; message: string } | undefined;
      if (msg.kind === "acquire" && msg.max_concurrent !== undefined) max = Math.max(1, Math.floor(msg.max_concurrent));
      switch (msg.kind) {
        case "acquire":
          if (running[msg.run_id] !== undefined) {
            running[msg.run_id] = now + msg.ttl_ms;
            reply = { granted: true };
          } else if (Object.keys(running).length < max && waiting.length === 0) {
            running[msg.run_id] = now + msg.ttl_ms;
            reply = { granted: true };
          } else if (waiting.some((w) => w.run_id === msg.run_id)) {
            reply = { granted: false };
          } else if (waiting.length >= WAITING_LIMIT) {
            fail = { code: "overloaded", message: `tenant has ${WAITING_LIMIT} runs waiting for slots` };
          } else {
            waiting = [...waiting, { run_id: msg.run_id, job: msg.job, ttl_ms: msg.ttl_ms }];
            reply = { granted: false };
          }
          break;
        case "release":
          delete running[msg.run_id];
          if (waiting.some((w) => w.run_id === msg.run_id)) waiting = waiting.filter((w) => w.run_id !== msg.run_id);
          break;
        case "set_quota":
          max = Math.max(1, Math.floor(msg.max_concurrent));
          break;
        case "expire":
          break;
        case "status":
          reply = { running: Object.keys(running).length, waiting: waiting.length, max_concurrent: max };
          break;
      }
      // Grant waiting requests while there is room.
      if (waiting.length > 0 && Object.keys(running).length < max) {
        const rest = [...waiting];
        while (rest.length > 0 && Object.keys(running).length < max) {
          const w = rest.shift()!;
          running[w.run_id] = now + w.ttl_ms;
          effects.push({ kind: "send", to: { type: JOB_ACTOR, id: w.job }, msg: { kind: "slot_granted", run_id: w.run_id } });
        }
        waiting = rest;
      }
      const expiries = Object.values(running);
      if (expiries.length > 0) effects.push({ kind: "timer", name: "expire", atMs: Math.min(...expiries), msg: { kind: "expire" } });
      const same =
        max === state.max_concurrent && waiting === state.waiting &&
        Object.keys(running).length === Object.keys(state.running).length &&
        Object.entries(running).every(([k, v]) => state.running[k] === v);
      const next = same ? state : { max_concurrent: max, running, waiting };
      return { state: next, reply, effects, ...(fail ? { fail } : {}) };
    },
  };
}
