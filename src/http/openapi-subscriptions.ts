/**
 * The OpenAPI part of run-event subscriptions (/v1/subscriptions): its paths and schemas, written
 * by hand after the hand-written parser (src/app/subscription-body.ts) and its limits.
 */
import { MAX_SUBSCRIPTIONS_PER_TENANT, RUN_EVENT_TYPES } from "../protocol/events.ts";
import { SUBSCRIPTION_LIMITS } from "../app/subscription-body.ts";

type Json = Record<string, unknown>;

/** The document's helpers (openapi.ts). */
export interface OpenApiHelpers {
  json: (schema: Json, description: string, headers?: Json) => Json;
  ref: (id: string) => Json;
  errors: (...codes: number[]) => Json;
  param: (
    name: string,
    where: "path" | "query" | "header",
    schema: Json,
    description: string,
  ) => Json;
}

/** Run-event subscriptions: create, list, get, delete. */
export function subscriptionPaths(h: OpenApiHelpers): Json {
  const { json, ref, errors } = h;
  const subscriptionId = h.param(
    "subscription_id",
    "path",
    { type: "string", pattern: "^[A-Za-z0-9_-]{1,64}$" },
    "subscription id",
  );
  return {
    "/v1/subscriptions": {
      post: {
        summary: `Subscribe to run events by webhook (signed POSTs) or email (the operator's SMTP server, at most a few mails per tenant per window, the rest in a digest). At most ${MAX_SUBSCRIPTIONS_PER_TENANT} per tenant`,
        requestBody: {
          required: true,
          content: { "application/json": { schema: ref("CreateSubscriptionRequest") } },
        },
        responses: {
          "201": json(
            ref("SubscriptionCreated"),
            "created; a webhook subscription's `secret` (which signs its POSTs) is shown only here",
            { Location: { schema: { type: "string" } } },
          ),
          ...errors(400, 413, 422),
        },
      },
      get: {
        summary: "List the tenant's subscriptions, oldest first (all of them: no paging)",
        responses: {
          "200": json(
            {
              type: "object",
              required: ["subscriptions"],
              properties: { subscriptions: { type: "array", items: ref("Subscription") } },
            },
            "the subscriptions",
          ),
        },
      },
    },
    "/v1/subscriptions/{subscription_id}": {
      get: {
        summary: "Get a subscription",
        parameters: [subscriptionId],
        responses: { "200": json(ref("Subscription"), "the subscription"), ...errors(404) },
      },
      delete: {
        summary:
          "Delete a subscription (schedulers stop delivering to it as soon as they see the delete; within 10 s)",
        parameters: [subscriptionId],
        responses: { "204": { description: "deleted" }, ...errors(404) },
      },
    },
  };
}

const eventTypes: Json = { type: "string", enum: [...RUN_EVENT_TYPES] };

const webhook: Json = {
  type: "object",
  additionalProperties: false,
  required: ["url"],
  properties: {
    url: {
      type: "string",
      format: "uri",
      maxLength: SUBSCRIPTION_LIMITS.urlChars,
      description:
        "http(s) URL without credentials; schedulers refuse non-public addresses and plain http unless the operator allows them",
    },
  },
};
const email: Json = {
  type: "object",
  additionalProperties: false,
  required: ["to"],
  properties: {
    to: {
      type: "string",
      format: "email",
      maxLength: SUBSCRIPTION_LIMITS.emailChars,
      description: "one address local@domain (no display name, no list)",
    },
  },
};

/** The subscription schemas (written by hand: the parser is hand-written, subscription-body.ts). */
export function subscriptionSchemas(ref: (id: string) => Json): Record<string, Json> {
  const view: Json = {
    type: "object",
    required: [
      "subscription_id",
      "tenant_id",
      "events",
      "job_id",
      "webhook",
      "email",
      "created_at",
    ],
    properties: {
      subscription_id: { type: "string" },
      tenant_id: { type: "string" },
      events: { type: "array", items: eventTypes },
      job_id: { type: ["string", "null"], description: "only this job's runs; null: every job" },
      webhook: { oneOf: [webhook, { type: "null" }] },
      email: { oneOf: [email, { type: "null" }] },
      created_at: { type: "string", format: "date-time" },
    },
  };
  return {
    CreateSubscriptionRequest: {
      type: "object",
      additionalProperties: false,
      required: ["events"],
      description: "exactly one of webhook and email",
      properties: {
        events: {
          type: "array",
          items: eventTypes,
          minItems: 1,
          maxItems: RUN_EVENT_TYPES.length,
          uniqueItems: true,
        },
        job_id: {
          type: ["string", "null"],
          pattern: "^[A-Za-z0-9_-]{1,64}$",
          description: "only this job's runs (it must exist); absent or null: every job",
        },
        webhook,
        email,
      },
    },
    Subscription: view,
    SubscriptionCreated: {
      allOf: [
        ref("Subscription"),
        {
          type: "object",
          properties: {
            secret: {
              type: "string",
              description: "webhook subscriptions only: signs each POST (Kairos-Signature)",
            },
          },
        },
      ],
    },
  };
}
