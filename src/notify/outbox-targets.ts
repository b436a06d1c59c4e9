/**
 * Where one outbox entry goes, and one try at each destination. A dead letter goes to the
 * tenant's dead-letter webhook (`tenant`, the legacy body) and to every subscription to
 * `run.dead_lettered`; any other run event to the subscriptions to its type (and its job, when
 * they name one). Each destination has a stable id (`tenant`, or the subscription id) that the
 * entry records once delivered, so a retry of the entry never repeats a destination that is done.
 *
 * A webhook try is `done` after a 2xx or a refusal retrying cannot fix (the SSRF guard, a
 * redirect, a 4xx other than 429), `retry` after anything else, `not_tried` when the tenant's
 * deliveries on this node are at their bound. An email is `done` once the Mailer has it (its
 * bound and digest are the Mailer's; mail.ts).
 */
import { assertNever } from "../lib/assert.ts";
import type { RunView } from "../protocol/model.ts";
import { subscribed, type RunEventType, type SubscriptionRecord } from "../protocol/events.ts";
import type { Mailer } from "./mail.ts";
import {
  notifyDeadLetter,
  notifyRunEvent,
  type PostOptions,
  type WebhookOutcome,
  type WebhookSender,
  type WebhookTarget,
} from "./webhook.ts";

export type Destination =
  | { id: string; kind: "webhook"; target: WebhookTarget; legacy: boolean }
  | { id: string; kind: "email"; to: string };

/** The destinations of an event of `run`: the legacy dead-letter webhook, then the subscriptions. */
export function destinationsOf(
  type: RunEventType,
  run: RunView,
  legacy: WebhookTarget | undefined,
  subs: readonly SubscriptionRecord[],
  sender: WebhookSender | undefined,
): Destination[] {
  const out: Destination[] = [];
  if (legacy && type === "run.dead_lettered")
    out.push({ id: "tenant", kind: "webhook", target: legacy, legacy: true });
  for (const s of subs) {
    if (!subscribed(s, type, run.job_id)) continue;
    if (s.webhook && s.secret)
      out.push({
        id: s.subscription_id,
        kind: "webhook",
        target: { url: s.webhook.url, secret: s.secret, ...(sender ? { sender } : {}) },
        legacy: false,
      });
    else if (s.email) out.push({ id: s.subscription_id, kind: "email", to: s.email.to });
  }
  return out;
}

export type TryResult =
  | { id: string; result: "done"; outcome?: WebhookOutcome }
  | { id: string; result: "retry"; outcome: WebhookOutcome }
  | { id: string; result: "not_tried"; outcome: WebhookOutcome };

/** One try at one destination. */
export async function tryDestination(
  d: Destination,
  type: RunEventType,
  run: RunView,
  deps: { mailer: Mailer | undefined; post: PostOptions },
): Promise<TryResult> {
  switch (d.kind) {
    case "email":
      // No SMTP server configured on this node: nothing to do, and nothing a retry would fix.
      deps.mailer?.submit(run.tenant_id, d.to, type, run);
      return { id: d.id, result: "done" };
    case "webhook": {
      const r = d.legacy
        ? await notifyDeadLetter(d.target, run, deps.post)
        : await notifyRunEvent(d.target, type, run, deps.post);
      if (!r.ok && r.status === undefined && r.error?.startsWith("dropped:"))
        return { id: d.id, result: "not_tried", outcome: r };
      const final =
        r.ok ||
        r.refused === true ||
        (r.status !== undefined && r.status >= 400 && r.status < 500 && r.status !== 429);
      return final
        ? { id: d.id, result: "done", outcome: r }
        : { id: d.id, result: "retry", outcome: r };
    }
    default:
      return assertNever(d, "outbox destination");
  }
}
