/**
 * The OpenAPI part of the tenant's live figures (`GET /v1/stats`) and of the operators' view
 * (`GET /v1/admin/cluster`): their paths and their answers' schemas, written by hand after
 * src/protocol/stats.ts.
 */
import { STATS_FORECAST_MINUTES, STATS_POINTS, STATS_STEP_MS } from "../protocol/stats.ts";
import type { OpenApiHelpers } from "./openapi-subscriptions.ts";

type Json = Record<string, unknown>;

const instant: Json = { type: "string", format: "date-time" };
const count: Json = { type: "integer", minimum: 0 };
const seconds: Json = { type: ["number", "null"], minimum: 0 };

/** One step of the series. */
const point: Json = {
  type: "object",
  required: ["at", "started", "started_per_s", "lag_p50_s", "lag_p99_s", "waiting"],
  properties: {
    at: { ...instant, description: "start of the step" },
    started: { ...count, description: "runs whose first attempt started in the step" },
    started_per_s: { type: "number", minimum: 0 },
    lag_p50_s: { ...seconds, description: "dispatch lag of those runs, p50 (null: none)" },
    lag_p99_s: { ...seconds, description: "dispatch lag of those runs, p99 (null: none)" },
    waiting: {
      type: ["integer", "null"],
      minimum: 0,
      description: "runs due and not started at the step's sample (null: no node sampled it)",
    },
  },
};

/** The answers' schemas (`ClusterView`, `TenantStats`). */
export function statsSchemas(): Record<string, Json> {
  return {
    ClusterView: clusterViewSchema(),
    TenantStats: {
      type: "object",
      required: [
        "tenant_id",
        "at",
        "step_s",
        "series",
        "totals",
        "waiting",
        "forecast",
        "nodes",
        "partial",
      ],
      properties: {
        tenant_id: { type: "string", description: "the key's tenant: always the caller's own" },
        at: instant,
        step_s: { type: "integer", const: STATS_STEP_MS / 1000 },
        series: {
          type: "array",
          minItems: STATS_POINTS,
          maxItems: STATS_POINTS,
          items: point,
          description: `the last ${STATS_POINTS} complete steps (${(STATS_POINTS * STATS_STEP_MS) / 60_000} minutes), oldest first`,
        },
        totals: {
          type: "object",
          required: ["started", "lag_p50_s", "lag_p99_s"],
          properties: { started: count, lag_p50_s: seconds, lag_p99_s: seconds },
          description: "over the whole series",
        },
        waiting: {
          type: "object",
          required: ["slot", "worker"],
          properties: { slot: count, worker: count },
          description: "runs due and not started now: for a slot of the tenant, for a worker",
        },
        forecast: {
          type: ["object", "null"],
          required: ["from", "per_minute", "total"],
          properties: {
            from: { ...instant, description: "the current minute" },
            per_minute: {
              type: "array",
              items: count,
              minItems: STATS_FORECAST_MINUTES,
              maxItems: STATS_FORECAST_MINUTES,
            },
            total: count,
          },
          description:
            "runs the tenant's schedules make due per minute over the next hour (recomputed once a minute; manual runs, retries and catch-ups not included); null before the schedulers' first forecast",
        },
        nodes: {
          type: "object",
          required: ["asked", "answered"],
          properties: { asked: count, answered: count },
          description: "scheduler nodes asked, and those that answered within the deadline",
        },
        partial: { type: "boolean", description: "some scheduler did not answer in time" },
      },
    },
  };
}

/** The operators' view's schema (`ClusterView`). */
function clusterViewSchema(): Json {
  const obj = (properties: Record<string, Json>, description?: string): Json => ({
    type: "object",
    required: Object.keys(properties),
    properties,
    ...(description ? { description } : {}),
  });
  const str: Json = { type: "string" };
  const nullableCount: Json = { type: ["integer", "null"], minimum: 0 };
  return obj({
    at: instant,
    nodes: {
      type: "array",
      items: obj({
        node_id: str,
        roles: { type: "array", items: str },
        started_at: instant,
        last_heartbeat: instant,
      }),
      description: "the membership records of the `nodes` bucket",
    },
    partitions: obj({
      count: count,
      held: { type: "array", items: obj({ partition: count, node: str }) },
      unheld: { type: "array", items: count },
    }),
    schedulers: {
      type: "array",
      items: obj({
        node_id: str,
        answered: { type: "boolean" },
        partitions: nullableCount,
        actors_active: nullableCount,
        mailbox_depth: nullableCount,
        runs_waiting: {
          type: ["object", "null"],
          required: ["slot", "worker"],
          properties: { slot: count, worker: count },
        },
      }),
      description: "each live scheduler's own part (null figures: it did not answer in time)",
    },
    workers: {
      type: "array",
      items: obj({
        worker_id: str,
        executor: str,
        slots: count,
        free: count,
        prefetch: count,
        standing: { type: "string", description: "trusted, benched or on_trial" },
        seen_by: count,
      }),
    },
    fair_shares: {
      type: ["object", "null"],
      required: ["capacity", "computed_at", "tenants"],
      properties: {
        capacity: count,
        computed_at: { type: ["string", "null"], format: "date-time" },
        tenants: {
          type: "array",
          items: obj({
            tenant_id: str,
            weight: { type: "number" },
            demand: { type: "number" },
            share: { type: ["number", "null"] },
            used: { type: ["number", "null"], description: "grants held on average" },
          }),
        },
      },
      description: "the fleet actor's shares; null when it did not answer in time",
    },
  });
}

/** `GET /v1/stats` and the operators' `GET /v1/admin/cluster`. */
export function statsPaths(h: OpenApiHelpers): Json {
  return {
    "/v1/stats": {
      get: {
        summary:
          "The tenant's live figures: runs started, dispatch lag p50/p99 and runs waiting over the last 10 minutes in 5 s steps, and the runs due per minute over the next hour. Always the key's tenant's; takes no parameters (any is a 400)",
        responses: {
          "200": h.json(h.ref("TenantStats"), "the figures, summed over the scheduler nodes"),
          ...h.errors(400, 403),
        },
      },
    },
    "/v1/admin/cluster": {
      get: {
        summary:
          "The operators' view (an operator key, `kop_…`, from `kairos admin operator-key create`; a tenant's API key is 403): nodes, partitions and their holders, schedulers, workers and their slots, and each tenant's fair share against its demand and use. Takes no parameters",
        responses: {
          "200": h.json(h.ref("ClusterView"), "the view"),
          ...h.errors(400, 403),
        },
      },
    },
  };
}
