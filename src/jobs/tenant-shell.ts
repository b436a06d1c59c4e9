/**
 * The tenant actor's shell: its slot grants are durable, in `GRANT_SHARDS` shard keys per tenant
 * in the actors bucket, `grants.<partition>.<tenant_id>.<shard>` → `{ <grant_id>: exp }` (grant
 * expiry, ms; grant id = `<run_id>_<slot_seq>`, its shard a hash of the id). Grants are written
 * before the reply (so a grant the job actor hears of is on disk), and reloaded when the actor
 * activates — after passivation, a move or a restart — so a tenant's maximum of concurrent runs
 * holds across all of them. Expired grants are dropped by the core and removed here.
 *
 * **Group commit** (`GrantTable`): the writes of a tenant's decisions are pipelined
 * (ActorRegistration.pipelinePre: the next message does not wait for the last one's write) and
 * batched: one batch in flight per tenant, each shard written with CAS on its revision; every grant and release decided meanwhile goes into
 * the next batch, which rewrites only the shards they touched, and each reply waits for the batch
 * that holds its change. A release is not written on its own: it leaves the shard with the next
 * grant written there (a release is safe to lose: a grant still on disk after a reload counts
 * against the cap until the audit — `slot_audit` — asks its job actor and frees it; the cap can
 * be under-used for a while after a move, never exceeded). In a burst a batch carries hundreds
 * of grants in at most `GRANT_SHARDS` puts, instead of a put per grant and a delete per release
 * (two KV operations per run); when idle a grant costs one put and its release none.
 *
 * Gotchas: a failed batch (a CAS conflict too) rejects every reply waiting for it, and the host then drops the actor
 * (pipelined write failed), whose next activation reloads the table from KV (`loadSoft` replaces
 * this instance's table). A batch is not started once this node no longer owns the tenant.
 * Grant keys of the per-grant layout before shards (`grant.<p>.<tenant>.<grant>`) are not read:
 * no migration (no release shipped with them).
 */
import type { ActorRegistration, ShellContext } from "../actors/host.ts";
import { decode, encode } from "../cluster/codec.ts";
import { hash32 } from "../cluster/hash.ts";
import type { KvStore } from "../cluster/kv.ts";
import { assertNever } from "../lib/assert.ts";
import { KairosError } from "../lib/errors.ts";
import { makeTenantActor, type TenantEffect, type TenantFairOptions, type TenantState } from "./tenant-actor.ts";

export const GRANT_PREFIX = "grants";
/** Shard keys per tenant: bounds a shard's size (a tenant's grants / shards) and a batch's puts. */
export const GRANT_SHARDS = 16;
const shardKey = (partition: number, tenantId: string, shard: number) => `${GRANT_PREFIX}.${partition}.${tenantId}.${shard}`;
export const grantShard = (grantId: string): number => hash32(grantId) % GRANT_SHARDS;

/** One tenant's durable grants on this node: the shards as written, and the next batch. */
export class GrantTable {
  readonly #shards: Map<string, number>[] = Array.from({ length: GRANT_SHARDS }, () => new Map<string, number>());
  /** Each shard's revision as this table last read or wrote it (0: absent). */
  readonly #revs: number[] = new Array<number>(GRANT_SHARDS).fill(0);
  readonly #dirty = new Set<number>();
  #inFlight: Promise<void> = Promise.resolve();
  /** The batch that will carry the changes made now (not started yet), if any. */
  #next: Promise<void> | null = null;
  /** Batches written and KV puts made (for tests and the cost accounting). */
  batches = 0;
  puts = 0;

  constructor(
    private readonly kv: KvStore,
    private readonly partition: number,
    private readonly tenantId: string,
  ) {}

  /** Reads the tenant's shards into `running` (grant id → expiry). */
  async load(running: Map<string, number>): Promise<void> {
    const prefix = `${GRANT_PREFIX}.${this.partition}.${this.tenantId}.`;
    for (const e of await this.kv.list(`${prefix}*`)) {
      const shard = Number(e.key.slice(prefix.length));
      if (!Number.isInteger(shard) || shard < 0 || shard >= GRANT_SHARDS) continue;
      this.#revs[shard] = e.revision;
      for (const [id, exp] of Object.entries(decode<Record<string, number>>(e.value))) {
        this.#shards[shard]!.set(id, exp);
        running.set(id, exp);
      }
    }
  }

  /**
   * Applies the changes; resolves once a batch holding them is written. A release (`del_grant`)
   * alone starts no batch: it leaves its shard at the next batch that writes the shard (a lost
   * release over-counts after a reload — never under — until the grant audit frees it).
   */
  apply(fx: readonly TenantEffect[], ctx: ShellContext): Promise<void> {
    let sync = false;
    for (const f of fx) {
      const shard = grantShard(f.run_id);
      switch (f.kind) {
        case "del_grant":
          this.#shards[shard]!.delete(f.run_id);
          break;
        case "sync_grant":
          sync = true;
          break;
        case "put_grant":
          this.#shards[shard]!.set(f.run_id, f.expires_at_ms);
          this.#dirty.add(shard);
          break;
        default:
          assertNever(f, "tenant effect");
      }
    }
    // A grant confirmed unchanged (a duplicate acquire) is answered only once no batch that may
    // hold it is still being written: a failed batch then fails this reply too, instead of the
    // job holding a grant the reloaded tenant never saw (review finding, "Known gaps").
    if (this.#dirty.size === 0) return sync ? (this.#next ?? this.#inFlight) : Promise.resolve();
    this.#next ??= this.#inFlight.catch(() => undefined).then(() => this.#write(ctx));
    return this.#next;
  }

  async #write(ctx: ShellContext): Promise<void> {
    const shards = [...this.#dirty];
    this.#dirty.clear();
    this.#inFlight = this.#next!;
    this.#next = null;
    if (!ctx.stillOwner()) throw new KairosError("not_owner", `tenant ${this.tenantId}: no longer the owner`);
    this.batches++;
    this.puts += shards.length;
    await Promise.all(shards.map(async (s) => {
      // CAS: a write of an earlier incarnation of this tenant (dropped, its batch still in flight)
      // can never land over grants a later one wrote, nor a later one over the earlier's unseen.
      const key = shardKey(this.partition, this.tenantId, s);
      const value = encode(Object.fromEntries(this.#shards[s]!));
      const rev = this.#revs[s]!;
      const r = rev === 0 ? await this.kv.create(key, value) : await this.kv.update(key, value, rev);
      if (!r.ok) throw new KairosError("not_owner", `tenant ${this.tenantId}: grant shard ${s} was written by another incarnation; reload`);
      this.#revs[s] = r.revision;
    }));
  }
}

/** `fair`: report demand to the fleet actor and grant within the fair share (tenant-actor.ts). */
export function tenantRegistration(kv: KvStore, defaultMaxConcurrent = 100, fair?: TenantFairOptions): ActorRegistration & { tables: Map<string, GrantTable> } {
  const definition = makeTenantActor(defaultMaxConcurrent, fair);
  /** Per tenant actor instance on this node (`<partition>.<tenant>`), replaced at each load. */
  const tables = new Map<string, GrantTable>();
  return {
    definition,
    tables,
    // Grant writes are pipelined: each reply waits for its own batch, the next message does not.
    pipelinePre: true,
    async loadSoft(id, partition): Promise<TenantState> {
      const state = definition.initialState(id);
      const table = new GrantTable(kv, partition, id);
      await table.load(state.running);
      tables.set(`${partition}.${id}`, table);
      return state;
    },
    async perform(pre, ctx) {
      const table = tables.get(`${ctx.partition}.${ctx.address.id}`);
      if (!table) throw new KairosError("not_owner", `tenant ${ctx.address.id}: grant table not loaded here`);
      await table.apply(pre as TenantEffect[], ctx);
    },
  };
}
