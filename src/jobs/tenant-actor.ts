/**
 * The tenant actor's pure core: one per tenant, it hands out worker slots to the tenant's job
 * actors within the tenant's maximum of concurrent runs. Requests beyond the maximum wait in a
 * bounded FIFO and are granted (by a message to the job actor) as slots come back. A grant past
 * its expiry (the run's timeout plus a grace) is extended and audited with its job actor, which
 * releases it unless its run still holds it; audits also run every SLOT_AUDIT_MS while runs wait,
 * so a vanished release cannot leak slots, yet a run waiting for a flexible start keeps its slot.
 *
 * Grants are durable, one KV key each (`grant.<partition>.<tenant>.<grant_id>`, the grant id being
 * `<run_id>_<slot_seq>`, see ids.ts `grantId`; written by the
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
  /** grant id (`<run_id>_<slot_seq>`) → grant expiry (ms). */
  running: Record<string, number>;
  waiting: { run_id: string; job: string; ttl_ms: number }[];
  /** When the next grant audit is due (armed while runs wait); see `audit`. */
  audit_at_ms?: number;
  /** When the `expire` timer is armed for (the earliest grant expiry). */
  expire_at_ms?: number;
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
/** How long an expired grant is extended while its job actor is asked whether it still holds it. */
export const EXPIRED_GRANT_GRACE_MS = 60_000;
/** Most grants audited per round. */
export const AUDIT_LIMIT = 1_000;

/** Grant counts by grant table (tables are immutable once built), so a message costs O(1), not O(grants). */
const counts = new WeakMap<Record<string, number>, number>();
const countOf = (r: Record<string, number>): number => {
  let n = counts.get(r);
  if (n === undefined) counts.set(r, (n = Object.keys(r).length));
  return n;
};

export function makeTenantActor(defaultMaxConcurrent = 100): ActorDefinition<TenantState, TenantMsg, TenantReply, TenantEffect> {
  return {
    type: TENANT_ACTOR,
    persist: false,
    initialState: () => ({ max_concurrent: defaultMaxConcurrent, running: {}, waiting: [] }),
    receive(state, msg, ctx) {
      const now = ctx.nowMs;
      // The grant table is copied once, on the first change (one O(grants) copy at most per
      // message); counts and the next expiry are kept incrementally.
      let running = state.running;
      let n = countOf(running);
      let copied = false;
      const pre: TenantEffect[] = [];
      const own = () => {
        if (!copied) {
          running = { ...running };
          copied = true;
        }
      };
      const put = (id: string, exp: number) => {
        own();
        if (running[id] === undefined) n++;
        running[id] = exp;
        pre.push({ kind: "put_grant", run_id: id, expires_at_ms: exp });
      };
      const del = (id: string) => {
        if (running[id] === undefined) return;
        own();
        delete running[id];
        n--;
        pre.push({ kind: "del_grant", run_id: id });
      };
      let waiting = state.waiting;
      let max = state.max_concurrent;
      let expireAt = state.expire_at_ms;
      const effects: HostEffect<TenantMsg>[] = [];
      let reply: TenantReply = null;
      let fail: { code: "overloaded"; message: string } | undefined;
      if (msg.kind === "acquire" && msg.max_concurrent !== undefined) max = Math.max(1, Math.floor(msg.max_concurrent));
      switch (msg.kind) {
        case "acquire":
          if (running[msg.run_id] !== undefined) {
            if (running[msg.run_id] !== now + msg.ttl_ms) put(msg.run_id, now + msg.ttl_ms);
            reply = { granted: true };
          } else if (n < max && waiting.length === 0) {
            put(msg.run_id, now + msg.ttl_ms);
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
          del(msg.run_id);
          if (waiting.some((w) => w.run_id === msg.run_id)) waiting = waiting.filter((w) => w.run_id !== msg.run_id);
          break;
        case "set_quota":
          max = Math.max(1, Math.floor(msg.max_concurrent));
          break;
        case "expire":
          // A grant past its expiry is not dropped blindly (its run may still wait for a flexible
          // start or a free worker): it is extended and audited; the job releases it if unheld.
          for (const [id, exp] of Object.entries(running)) {
            if (exp > now) continue;
            const jobId = jobIdOfRun(splitGrant(id).run_id);
            if (!jobId) {
              del(id);
              continue;
            }
            put(id, now + EXPIRED_GRANT_GRACE_MS);
            effects.push({ kind: "send", to: { type: JOB_ACTOR, id: jobActorId(ctx.id, jobId) }, msg: { kind: "slot_audit", run_id: id } });
          }
          expireAt = undefined;
          break;
        case "audit":
          for (const run_id of Object.keys(running).slice(0, AUDIT_LIMIT)) {
            const jobId = jobIdOfRun(splitGrant(run_id).run_id);
            if (jobId) effects.push({ kind: "send", to: { type: JOB_ACTOR, id: jobActorId(ctx.id, jobId) }, msg: { kind: "slot_audit", run_id } });
          }
          break;
        case "status":
          reply = { running: n, waiting: waiting.length, max_concurrent: max };
          break;
      }
      // Grant waiting requests while there is room.
      if (waiting.length > 0 && n < max) {
        const rest = [...waiting];
        while (rest.length > 0 && n < max) {
          const w = rest.shift()!;
          put(w.run_id, now + w.ttl_ms);
          effects.push({ kind: "send", to: { type: JOB_ACTOR, id: w.job }, msg: { kind: "slot_granted", run_id: w.run_id } });
        }
        waiting = rest;
      }
      // The expiry timer: at the earliest grant expiry (recomputed only after an `expire`).
      if (expireAt === undefined && n > 0) expireAt = Object.values(running).reduce((a, b) => Math.min(a, b), Number.POSITIVE_INFINITY);
      for (const fx of pre) if (fx.kind === "put_grant" && (expireAt === undefined || fx.expires_at_ms < expireAt)) expireAt = fx.expires_at_ms;
      if (n === 0) expireAt = undefined;
      if (expireAt !== undefined && expireAt !== state.expire_at_ms) effects.push({ kind: "timer", name: "expire", atMs: expireAt, msg: { kind: "expire" } });
      let auditAt = msg.kind === "audit" ? undefined : state.audit_at_ms;
      if (waiting.length > 0 && (auditAt === undefined || auditAt <= now)) {
        auditAt = now + SLOT_AUDIT_MS;
        effects.push({ kind: "timer", name: "audit", atMs: auditAt, msg: { kind: "audit" } });
      }
      if (copied) counts.set(running, n);
      const same = !copied && max === state.max_concurrent && waiting === state.waiting && auditAt === state.audit_at_ms && expireAt === state.expire_at_ms;
      const next: TenantState = same ? state : {
        max_concurrent: max, running, waiting,
        ...(auditAt !== undefined ? { audit_at_ms: auditAt } : {}),
        ...(expireAt !== undefined ? { expire_at_ms: expireAt } : {}),
      };
      return { state: next, reply, effects, pre, ...(fail ? { fail } : {}) };
    },
  };
}
