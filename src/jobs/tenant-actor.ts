/**
 * The tenant actor's pure core: one per tenant, it hands out worker slots to the tenant's job
 * actors within the tenant's maximum of concurrent runs. Requests beyond the maximum wait in a
 * bounded FIFO and are granted (by a message to the job actor) as slots come back. A grant
 * expires after the run's timeout plus a grace, so a job actor that vanished cannot leak slots.
 *
 * Grants are durable, one KV key each (`grant.<partition>.<tenant>.<run_id>`, written by the
 * shell in src/jobs/tenant-shell.ts before the reply): a tenant actor that is passivated, moves
 * or restarts reloads its running grants, so the cap holds across moves (hole 8: with soft grants
 * a moved tenant actor forgot its running runs and could run twice its maximum). One small key
 * per grant instead of the whole grant table per write keeps a burst cheap: a put per grant, a
 * delete per release. The waiting list stays soft: waiting job actors ask again every
 * `SLOT_RECHECK_MS` (acquire is idempotent).
 *
 * Weighted fair sharing between tenants builds on this same path (a later issue): the pool
 * will be shared max-min fairly by weight across tenant actors.
 */
import type { ActorDefinition, HostEffect } from "../actors/actor.ts";
import { JOB_ACTOR, TENANT_ACTOR, jobActorId, jobIdOfRun, splitGrant } from "./ids.ts";

export interface TenantState {
  max_concurrent: number;
  /** run_id → grant expiry (ms). */
  running: Record<string, number>;
  waiting: { run_id: string; job: string; ttl_ms: number }[];
  /** When the next grant audit is due (armed while runs wait); see `audit`. */
  audit_at_ms?: number;
}

export type TenantMsg =
  | { kind: "acquire"; run_id: string; job: string; ttl_ms: number; max_concurrent?: number }
  | { kind: "release"; run_id: string }
  | { kind: "set_quota"; max_concurrent: number }
  | { kind: "expire" }
  | { kind: "audit" }
  | { kind: "status" };

/** Grant writes, performed before the reply (see the module header). */
export type TenantEffect = { kind: "put_grant"; run_id: string; expires_at_ms: number } | { kind: "del_grant"; run_id: string };

export type TenantReply = { granted: boolean } | { running: number; waiting: number; max_concurrent: number } | null;

export const WAITING_LIMIT = 100_000;
/**
 * While runs wait, every this often the tenant asks the job actor of each grant whether its run
 * still holds the slot (`slot_audit`); a grant whose release was lost (a crash, a dropped
 * message) is released then, instead of blocking the tenant until it expires.
 */
export const SLOT_AUDIT_MS = 10_000;
/** Most grants audited per round. */
export const AUDIT_LIMIT = 1_000;

export function makeTenantActor(defaultMaxConcurrent = 100): ActorDefinition<TenantState, TenantMsg, TenantReply, TenantEffect> {
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
        case "audit":
          for (const run_id of Object.keys(running).slice(0, AUDIT_LIMIT)) {
            const jobId = jobIdOfRun(splitGrant(run_id).run_id);
            if (jobId) effects.push({ kind: "send", to: { type: JOB_ACTOR, id: jobActorId(ctx.id, jobId) }, msg: { kind: "slot_audit", run_id } });
          }
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
      let auditAt = msg.kind === "audit" ? undefined : state.audit_at_ms;
      if (waiting.length > 0 && (auditAt === undefined || auditAt <= now)) {
        auditAt = now + SLOT_AUDIT_MS;
        effects.push({ kind: "timer", name: "audit", atMs: auditAt, msg: { kind: "audit" } });
      }
      const expiries = Object.values(running);
      if (expiries.length > 0) effects.push({ kind: "timer", name: "expire", atMs: Math.min(...expiries), msg: { kind: "expire" } });
      const same =
        max === state.max_concurrent && waiting === state.waiting && auditAt === state.audit_at_ms &&
        Object.keys(running).length === Object.keys(state.running).length &&
        Object.entries(running).every(([k, v]) => state.running[k] === v);
      const next: TenantState = same ? state : { max_concurrent: max, running, waiting, ...(auditAt !== undefined ? { audit_at_ms: auditAt } : {}) };
      const pre: TenantEffect[] = [];
      for (const [run_id, exp] of Object.entries(running)) {
        if (state.running[run_id] !== exp) pre.push({ kind: "put_grant", run_id, expires_at_ms: exp });
      }
      for (const run_id of Object.keys(state.running)) if (running[run_id] === undefined) pre.push({ kind: "del_grant", run_id });
      return { state: next, reply, effects, pre, ...(fail ? { fail } : {}) };
    },
  };
}
