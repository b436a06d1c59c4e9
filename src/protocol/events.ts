/**
 * Run events for tenants (pure): the event types a tenant may subscribe to, which events a run's
 * end raises, and the subscription records the API manages and the notifier reads.
 *
 * A run ends once and raises: `run.succeeded`, `run.failed`, `run.timed_out`, `run.skipped` or
 * `run.missed` after its status; a run that ends `failed` or `timed_out` (its retries spent, or
 * not retryable) raises `run.dead_lettered` too. A cancelled or throttled run raises nothing (under
 * overload a tenant's throttled runs are counted in `kairos_runs_throttled_total`, not mailed).
 *
 * Pitfall: the event id is `<run_id>:<type>` (a run raises each type at most once); delivery is
 * at-least-once, so receivers dedupe on it.
 */
import type { RunView } from "./model.ts";

export const RUN_EVENT_TYPES = [
  "run.succeeded",
  "run.failed",
  "run.dead_lettered",
  "run.missed",
  "run.skipped",
  "run.timed_out",
] as const;
export type RunEventType = (typeof RUN_EVENT_TYPES)[number];

/** `local@domain`: RFC 5322 dot-atom local part, a DNS name of two labels or more; nothing else. */
export const EMAIL_ADDRESS =
  /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;

/** The event a run's terminal status raises (besides `run.dead_lettered`); none for `cancelled`. */
export function endEventOf(status: RunView["status"]): RunEventType | undefined {
  switch (status) {
    case "succeeded":
      return "run.succeeded";
    case "failed":
      return "run.failed";
    case "timed_out":
      return "run.timed_out";
    case "skipped":
      return "run.skipped";
    case "missed":
      return "run.missed";
    default:
      return undefined;
  }
}

/** The id receivers dedupe on (also the `Kairos-Delivery-Id` header of a subscription's POST). */
export function eventId(runId: string, type: RunEventType): string {
  return `${runId}:${type}`;
}

/** Subscriptions one tenant may hold. */
export const MAX_SUBSCRIPTIONS_PER_TENANT = 20;

/** Where a subscription's events go. */
export type SubscriptionChannel = { kind: "webhook"; url: string } | { kind: "email"; to: string };

/** A subscription as the API shows it (never its signing secret). */
export interface SubscriptionView {
  subscription_id: string;
  tenant_id: string;
  events: RunEventType[];
  /** Only this job's runs; null: every job of the tenant. */
  job_id: string | null;
  /** `{"url"}` for a webhook subscription, else null. */
  webhook: { url: string } | null;
  /** `{"to"}` for an email subscription, else null. */
  email: { to: string } | null;
  created_at: string;
}

/** What is stored: the view plus the webhook's signing secret. */
export interface SubscriptionRecord extends SubscriptionView {
  /** `whsec_…`: signs the webhook's POSTs; shown once, at creation. Webhooks only. */
  secret?: string;
}

/** A validated create request. */
export interface SubscriptionInput {
  events: RunEventType[];
  job_id: string | null;
  channel: SubscriptionChannel;
}

/** Whether `s` wants `type` for a run of `jobId`. */
export function subscribed(s: SubscriptionView, type: RunEventType, jobId: string): boolean {
  return (s.job_id === null || s.job_id === jobId) && s.events.includes(type);
}

/** The tenant's subscriptions (the API's side; implemented over the tenants bucket in src/notify). */
export interface SubscriptionService {
  /** Creates one; a webhook's answer carries its `secret` (shown once). `quota_exceeded` past the limit. */
  create(
    tenantId: string,
    input: SubscriptionInput,
  ): Promise<SubscriptionView & { secret?: string }>;
  /** Every subscription of the tenant (at most the per-tenant limit), oldest first. */
  list(tenantId: string): Promise<SubscriptionView[]>;
  /** `not_found` for an unknown id or another tenant's. */
  get(tenantId: string, subscriptionId: string): Promise<SubscriptionView>;
  /** `not_found` for an unknown id or another tenant's. */
  delete(tenantId: string, subscriptionId: string): Promise<void>;
}
