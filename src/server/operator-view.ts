/**
 * The operators' view of the cluster (`GET /v1/admin/cluster`, operator keys only): nodes from
 * the `nodes` bucket (membership records), each live scheduler's part asked on its stats subject
 * (`{kind: "node"}`: the partitions it holds, its actors, runs waiting and the workers its
 * directory hears — stats-responder.ts, from memory), and the fleet actor's fair shares with each
 * tenant's demand and use (one status message to the one fleet actor; no job or tenant actor is
 * asked, no run or job is read). An answer is reused for a second per API node, one read in
 * flight at a time. `mergeClusterView` is pure.
 */
import type { Bus } from "../cluster/bus.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { KvStore } from "../cluster/kv.ts";
import type { ActorRouter } from "../cluster/router.ts";
import type { MemberInfo } from "../cluster/membership.ts";
import type { Clock } from "../lib/clock.ts";
import type {
  ClusterView,
  ClusterViewSource,
  NodeOverview,
  WorkerView,
} from "../protocol/stats.ts";
import { FLEET_ACTOR, FLEET_ID, type FleetStatus } from "../slots/fleet-actor.ts";
import { MAX_STATS_NODES, statsSubject } from "./stats-responder.ts";

/** Most nodes and workers listed. */
export const MAX_VIEW_NODES = 1_000;
export const MAX_VIEW_WORKERS = 1_000;

const isCount = (x: unknown): x is number =>
  typeof x === "number" && Number.isSafeInteger(x) && x >= 0;

/** A scheduler's answer if it has the shape of one, else undefined. */
export function parseNodeOverview(x: unknown): NodeOverview | undefined {
  if (x === null || typeof x !== "object") return undefined;
  const a = x as Record<string, unknown>;
  const wait = a.runs_waiting;
  const ok =
    a.v === 1 &&
    typeof a.node === "string" &&
    Array.isArray(a.partitions) &&
    a.partitions.length <= 65_536 &&
    a.partitions.every(isCount) &&
    isCount(a.actors_active) &&
    isCount(a.mailbox_depth) &&
    Array.isArray(wait) &&
    wait.length === 2 &&
    wait.every(isCount) &&
    Array.isArray(a.workers) &&
    a.workers.length <= MAX_VIEW_WORKERS &&
    a.workers.every((w: unknown) => {
      const v = w as Record<string, unknown> | null;
      return (
        v !== null &&
        typeof v === "object" &&
        typeof v.worker_id === "string" &&
        typeof v.executor === "string" &&
        typeof v.standing === "string" &&
        isCount(v.slots) &&
        isCount(v.free) &&
        isCount(v.prefetch)
      );
    });
  return ok ? (x as NodeOverview) : undefined;
}

const iso = (ms: number): string => new Date(ms).toISOString();

/** The view from its parts (pure). `schedulers`: the live schedulers asked, with their answer or undefined. */
export function mergeClusterView(p: {
  nowMs: number;
  partitionCount: number;
  members: readonly (MemberInfo & { lastSeenMs: number })[];
  schedulers: readonly { node: string; answer: NodeOverview | undefined }[];
  fleet: FleetStatus | undefined;
}): ClusterView {
  const holder = new Map<number, string>();
  for (const s of p.schedulers)
    for (const part of s.answer?.partitions ?? [])
      if (part < p.partitionCount && !holder.has(part)) holder.set(part, s.node);
  const workers = new Map<string, WorkerView & { seen_by: number }>();
  for (const s of p.schedulers)
    for (const w of s.answer?.workers ?? []) {
      const seen = workers.get(w.worker_id);
      if (seen) seen.seen_by++;
      else if (workers.size < MAX_VIEW_WORKERS) workers.set(w.worker_id, { ...w, seen_by: 1 });
    }
  const held = [...holder].sort((a, b) => a[0] - b[0]);
  const fleet = p.fleet;
  return {
    at: iso(p.nowMs),
    nodes: p.members
      .slice(0, MAX_VIEW_NODES)
      .map((m) => ({
        node_id: m.nodeId,
        roles: [...m.roles],
        started_at: iso(m.startedAtMs),
        last_heartbeat: iso(m.lastSeenMs),
      }))
      .sort((a, b) => a.node_id.localeCompare(b.node_id)),
    partitions: {
      count: p.partitionCount,
      held: held.map(([partition, node]) => ({ partition, node })),
      unheld: Array.from({ length: p.partitionCount }, (_, i) => i).filter((i) => !holder.has(i)),
    },
    schedulers: p.schedulers
      .map((s) => ({
        node_id: s.node,
        answered: s.answer !== undefined,
        partitions: s.answer ? s.answer.partitions.length : null,
        actors_active: s.answer?.actors_active ?? null,
        mailbox_depth: s.answer?.mailbox_depth ?? null,
        runs_waiting: s.answer
          ? { slot: s.answer.runs_waiting[0], worker: s.answer.runs_waiting[1] }
          : null,
      }))
      .sort((a, b) => a.node_id.localeCompare(b.node_id)),
    workers: [...workers.values()].sort((a, b) => a.worker_id.localeCompare(b.worker_id)),
    fair_shares: fleet
      ? {
          capacity: fleet.capacity,
          computed_at: fleet.computed_at_ms === null ? null : iso(fleet.computed_at_ms),
          tenants: fleet.tenants.map((t) => ({
            tenant_id: t.tenant,
            weight: t.weight,
            demand: t.demand,
            share: t.share,
            used: t.used ?? null,
          })),
        }
      : null,
  };
}

export interface OperatorViewOptions {
  clusterName: string;
  bus: () => Bus;
  router: () => ActorRouter;
  nodes: () => KvStore;
  partitions: () => number;
  schedulers: () => readonly string[];
  clock: Clock;
  /** How long a scheduler and the fleet actor are waited for (default 1000 ms). */
  deadlineMs?: number;
}

export class OperatorView implements ClusterViewSource {
  #cached: { atMs: number; view: Promise<ClusterView> } | undefined;

  constructor(private readonly o: OperatorViewOptions) {}

  clusterView(): Promise<ClusterView> {
    const now = this.o.clock.monoMs();
    if (this.#cached !== undefined && now - this.#cached.atMs < 1_000) return this.#cached.view;
    const view = this.#read();
    const entry = { atMs: now, view };
    this.#cached = entry;
    void view.catch(() => {
      if (this.#cached === entry) this.#cached = undefined;
    });
    return view;
  }

  async #read(): Promise<ClusterView> {
    const timeout = this.o.deadlineMs ?? 1_000;
    const nodes = [...new Set(this.o.schedulers())].slice(0, MAX_STATS_NODES);
    const ask = encode({ kind: "node" });
    const [members, answers, fleet] = await Promise.all([
      this.o.nodes().list(">"),
      Promise.all(
        nodes.map(async (node) => {
          try {
            const r = await this.o
              .bus()
              .request(statsSubject(this.o.clusterName, node), ask, { timeout });
            return { node, answer: parseNodeOverview(decode<unknown>(r.data)) };
          } catch {
            return { node, answer: undefined };
          }
        }),
      ),
      this.o
        .router()
        .request<FleetStatus>(
          { type: FLEET_ACTOR, id: FLEET_ID },
          { kind: "status" },
          {
            deadlineMs: timeout,
          },
        )
        .catch(() => undefined),
    ]);
    return mergeClusterView({
      nowMs: this.o.clock.now(),
      partitionCount: this.o.partitions(),
      members: members
        .slice(0, MAX_VIEW_NODES)
        .map((e) => decode<MemberInfo & { lastSeenMs: number }>(e.value)),
      schedulers: answers,
      fleet,
    });
  }
}
