/**
 * The tenants' live figures between nodes. A scheduler node answers, on its control connection,
 * `kairos.<c>.stats.<node id>` with one tenant's figures from its own memory
 * (`NodeTenantStats`: its rolling series, tenant-series.ts, and its last forecast's share of the
 * tenant): no KV read, no actor, nothing on the dispatch path. An API node (`StatsGatherer`) asks
 * every live scheduler at once with a short deadline and sums what came back in time
 * (tenant-stats.ts); an answer for a tenant is cached for a second per API node, and one request
 * per tenant is in flight at a time, so dashboards left open cost the schedulers at most one
 * small answer per tenant per second per API node. The same subject answers `{kind: "node"}`
 * with the node's overview for the operators' view (operator-view.ts): its partitions, actors,
 * runs waiting and the workers its directory hears, also from memory; and `{kind: "runs"}` with
 * the named runs of a tenant active in the job actors it holds in memory (live-runs.ts), for the
 * tenant's runs list — read without a mailbox or a load, so never queued behind a burst.
 *
 * Who may ask: only API identities may publish on `stats.*` (nats-permissions.ts), and the
 * responder answers only an API identity's own inbox (reply-guard.ts, `api_read`). The tenant
 * comes from the API node's authentication of the caller, never from the caller's request; the
 * answer holds that tenant's figures only.
 */
import type { Bus, BusMsg, BusSubscription } from "../cluster/bus.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { EventBus } from "../cluster/events.ts";
import { replyRefusal, type InboxMode } from "../cluster/reply-guard.ts";
import type { Clock } from "../lib/clock.ts";
import { countBusRefusal } from "../metrics/index.ts";
import type { TenantSeries } from "../history/tenant-series.ts";
import { mergeTenantStats, parseNodeStats } from "../history/tenant-stats.ts";
import type {
  NodeOverview,
  NodeTenantStats,
  TenantStatsSource,
  TenantStatsView,
} from "../protocol/stats.ts";
import { KairosError } from "../lib/errors.ts";
import { OrderedMap } from "../lib/ordered-map.ts";
import { MAX_LIVE_RUN_IDS, type NodeLiveRuns } from "../protocol/live-runs.ts";
import type { RunView } from "../protocol/model.ts";

/** The most bytes of a `{kind: "runs"}` answer (NATS's default max_payload is 1 MiB). */
export const MAX_LIVE_RUNS_BYTES = 256 * 1024;

/** The subject a scheduler node answers on. */
export function statsSubject(clusterName: string, nodeId: string): string {
  return `kairos.${clusterName}.stats.${nodeId}`;
}

const TENANT_ID = /^t[a-z2-7]{16}$/;

export interface StatsResponderOptions {
  clusterName: string;
  nodeId: string;
  inboxes: InboxMode;
  series: TenantSeries;
  /** The node's last forecast for a tenant (undefined: none yet). */
  forecast: (tenantId: string) => { startMs: number; perMinute: number[] } | undefined;
  clock: Clock;
  events: EventBus;
  /** What this node tells the operators' view (`{kind: "node"}`); none: such requests are dropped. */
  overview?: () => Omit<NodeOverview, "v" | "node" | "now_ms">;
  /**
   * The named runs of a tenant active in the job actors this node holds in memory
   * (`{kind: "runs"}`, src/server/live-runs.ts); none: such requests are dropped.
   */
  liveRuns?: (tenantId: string, runIds: readonly string[]) => RunView[];
}

/** A tenant's answer of this node (pure but for the series and forecast it reads). */
export function nodeTenantStats(o: StatsResponderOptions, tenantId: string): NodeTenantStats {
  const now = o.clock.now();
  const { points, waitingNow } = o.series.read(tenantId, now);
  const f = o.forecast(tenantId);
  return {
    v: 1,
    node: o.nodeId,
    now_ms: now,
    points,
    waiting_now: waitingNow,
    forecast: f ? { start_ms: f.startMs, per_minute: f.perMinute } : null,
  };
}

export class StatsResponder {
  #sub: BusSubscription | undefined;

  constructor(private readonly o: StatsResponderOptions) {}

  start(bus: Bus): void {
    const subject = statsSubject(this.o.clusterName, this.o.nodeId);
    this.#sub = bus.subscribe(subject, {
      callback: (err, m) => {
        if (err === null) this.#answer(subject, m);
      },
    });
  }

  stop(): void {
    this.#sub?.unsubscribe();
    this.#sub = undefined;
  }

  /**
   * Answers one request; never throws into the connection's reader (an answer the server refuses,
   * e.g. past its max_payload, would otherwise stop the control connection reading).
   */
  #answer(subject: string, m: BusMsg): void {
    try {
      this.#answerOrThrow(subject, m);
    } catch {
      // Unanswered: the asker's deadline passes and it shows what it has (records, figures).
    }
  }

  #answerOrThrow(subject: string, m: BusMsg): void {
    const refused =
      m.subject !== subject
        ? { reason: "subject" as const, detail: `delivered under ${m.subject.slice(0, 120)}` }
        : replyRefusal(m.reply, { kind: "api_read" }, this.o.inboxes);
    if (refused !== undefined) {
      countBusRefusal("stats", refused.reason);
      this.o.events.emit({
        type: "reply_refused",
        responder: "stats",
        reason: refused.reason,
        subject: m.subject,
      });
      return;
    }
    let body: { tenant_id?: unknown; kind?: unknown; run_ids?: unknown } | null;
    try {
      body = decode<{ tenant_id?: unknown; kind?: unknown; run_ids?: unknown } | null>(m.data);
    } catch {
      body = null;
    }
    const overview = this.o.overview;
    if (body?.kind === "node" && overview !== undefined) {
      const o: NodeOverview = {
        v: 1,
        node: this.o.nodeId,
        now_ms: this.o.clock.now(),
        ...overview(),
      };
      m.respond(encode(o));
      return;
    }
    const tenantId = body?.tenant_id;
    if (typeof tenantId !== "string" || !TENANT_ID.test(tenantId)) {
      countBusRefusal("stats", "malformed");
      return;
    }
    if (body?.kind === "runs") {
      const ids = body.run_ids;
      if (
        this.o.liveRuns === undefined ||
        !Array.isArray(ids) ||
        ids.length > MAX_LIVE_RUN_IDS ||
        !ids.every((x) => typeof x === "string")
      ) {
        countBusRefusal("stats", "malformed");
        return;
      }
      // Bounded in bytes (a run of many attempts with long errors is tens of KB): runs past the
      // budget are left out, and the API shows them as recorded.
      let runs = this.o.liveRuns(tenantId, ids);
      let data = encode({ v: 1, node: this.o.nodeId, runs } satisfies NodeLiveRuns);
      while (data.length > MAX_LIVE_RUNS_BYTES && runs.length > 0) {
        runs = runs.slice(0, Math.floor(runs.length / 2));
        data = encode({ v: 1, node: this.o.nodeId, runs } satisfies NodeLiveRuns);
      }
      m.respond(data);
      return;
    }
    m.respond(encode(nodeTenantStats(this.o, tenantId)));
  }
}

export interface StatsGathererOptions {
  clusterName: string;
  /** The control connection (requests from this API node's identity). */
  bus: () => Bus;
  /** The live scheduler nodes (membership). */
  schedulers: () => readonly string[];
  clock: Clock;
  /** How long a node is waited for (default 750 ms). */
  deadlineMs?: number;
  /** How long an answer is reused for a tenant (default 1000 ms). */
  cacheMs?: number;
}

/** Most scheduler nodes asked at once, and most tenants' answers kept. */
export const MAX_STATS_NODES = 256;
const MAX_CACHED_TENANTS = 1_000;

/** The API node's side: asks every live scheduler for one tenant's figures and sums them. */
export class StatsGatherer implements TenantStatsSource {
  readonly #cache = new OrderedMap<string, { atMs: number; view: Promise<TenantStatsView> }>();

  constructor(private readonly o: StatsGathererOptions) {}

  tenantStats(tenantId: string): Promise<TenantStatsView> {
    const now = this.o.clock.monoMs();
    const hit = this.#cache.get(tenantId);
    if (hit !== undefined && now - hit.atMs < (this.o.cacheMs ?? 1000)) return hit.view;
    const view = this.#gather(tenantId);
    this.#cache.delete(tenantId);
    if (this.#cache.size >= MAX_CACHED_TENANTS) this.#cache.delete(this.#cache.oldest()!);
    this.#cache.set(tenantId, { atMs: now, view });
    // A failure is not kept: the next read asks again.
    void view.catch(() => {
      if (this.#cache.get(tenantId)?.view === view) this.#cache.delete(tenantId);
    });
    return view;
  }

  async #gather(tenantId: string): Promise<TenantStatsView> {
    const nodes = [...new Set(this.o.schedulers())].slice(0, MAX_STATS_NODES);
    if (nodes.length === 0)
      throw new KairosError("unavailable", "no scheduler node is live to answer");
    const body = encode({ tenant_id: tenantId });
    const timeout = this.o.deadlineMs ?? 750;
    const answers = await Promise.all(
      nodes.map(async (node) => {
        try {
          const r = await this.o.bus().request(statsSubject(this.o.clusterName, node), body, {
            timeout,
          });
          return parseNodeStats(decode<unknown>(r.data));
        } catch {
          return undefined; // not in time, gone, or not an answer: the figures are partial
        }
      }),
    );
    const ok = answers.filter((a): a is NodeTenantStats => a !== undefined);
    return mergeTenantStats(tenantId, this.o.clock.now(), ok, nodes.length);
  }
}
