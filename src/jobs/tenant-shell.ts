/**
 * The tenant actor's shell: its slot grants are durable, one key each in the actors bucket,
 * `grant.<partition>.<tenant_id>.<grant_id>` → `{ exp }` (grant expiry, ms; grant id = `<run_id>_<slot_seq>`). Grants are written
 * before the reply (so a grant the job actor hears of is on disk), and reloaded when the actor
 * activates — after passivation, a move or a restart — so a tenant's maximum of concurrent runs
 * holds across all of them. Expired grants are dropped by the core and deleted here. Writes are
 * pipelined (ActorRegistration.pipelinePre): a burst of acquires does not wait one KV round trip
 * per message, yet no grant is announced before its key is written.
 */
import type { ActorRegistration } from "../actors/host.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { KvStore } from "../cluster/kv.ts";
import { makeTenantActor, type TenantEffect, type TenantFairOptions, type TenantState } from "./tenant-actor.ts";

export const GRANT_PREFIX = "grant";
const grantKey = (partition: number, tenantId: string, runId: string) => `${GRANT_PREFIX}.${partition}.${tenantId}.${runId}`;

/** `fair`: report demand to the fleet actor and grant within the fair share (tenant-actor.ts). */
export function tenantRegistration(kv: KvStore, defaultMaxConcurrent = 100, fair?: TenantFairOptions): ActorRegistration {
  const definition = makeTenantActor(defaultMaxConcurrent, fair);
  return {
    definition,
    // Grant writes are pipelined: each reply waits for its own write, the next message does not.
    pipelinePre: true,
    async loadSoft(id, partition): Promise<TenantState> {
      const state = definition.initialState(id);
      const prefix = `${GRANT_PREFIX}.${partition}.${id}.`;
      for (const e of await kv.list(`${prefix}*`)) {
        state.running.set(e.key.slice(prefix.length), decode<{ exp: number }>(e.value).exp);
      }
      return state;
    },
    async perform(pre, ctx) {
      await Promise.all((pre as TenantEffect[]).map(async (fx) => {
        const key = grantKey(ctx.partition, ctx.address.id, fx.run_id);
        if (fx.kind === "put_grant") await kv.put(key, encode({ exp: fx.expires_at_ms }));
        else await kv.delete(key);
      }));
    },
  };
}
