/**
 * The body of a subscription create (REST `POST /v1/subscriptions`, NATS `subscriptions.create`):
 *
 *   {"events": ["run.failed", …], "job_id"?: "…", "webhook": {"url": "https://…"}}
 *   {"events": ["run.failed", …], "job_id"?: "…", "email": {"to": "ops@example.com"}}
 *
 * Exactly one of `webhook` and `email`. Each problem is one `invalid_argument` naming its field.
 * A webhook URL is checked for shape here (http or https, no credentials); whether its address may
 * be reached is the delivering scheduler's SSRF guard (src/notify/webhook.ts), as for dead letters.
 * An address is a plain `local@domain` — no display name, no list, nothing a mail header could be
 * bent with.
 */
import {
  EMAIL_ADDRESS,
  RUN_EVENT_TYPES,
  type RunEventType,
  type SubscriptionInput,
} from "../protocol/events.ts";
import { invalid, show } from "./input.ts";

export const SUBSCRIPTION_LIMITS = { urlChars: 2048, emailChars: 254 } as const;

const JOB_ID = /^[A-Za-z0-9_-]{1,64}$/;
function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function only(o: Record<string, unknown>, allowed: readonly string[], prefix: string): void {
  for (const k of Object.keys(o))
    if (!allowed.includes(k)) throw invalid(`${prefix}${k.slice(0, 100)}`, "unknown field");
}

function parseEvents(v: unknown): RunEventType[] {
  if (v === undefined) throw invalid("events", `required: a list of ${RUN_EVENT_TYPES.join(", ")}`);
  if (!Array.isArray(v)) throw invalid("events", `must be an array, got ${show(v)}`);
  if (v.length === 0 || v.length > RUN_EVENT_TYPES.length)
    throw invalid("events", `must name 1 to ${RUN_EVENT_TYPES.length} event types`);
  const out: RunEventType[] = [];
  v.forEach((e: unknown, i) => {
    const t = RUN_EVENT_TYPES.find((x) => x === e);
    if (t === undefined)
      throw invalid(`events[${i}]`, `must be one of ${RUN_EVENT_TYPES.join(", ")}, got ${show(e)}`);
    if (out.includes(t)) throw invalid(`events[${i}]`, `${t} is named twice`);
    out.push(t);
  });
  return out;
}

function parseWebhook(v: unknown): { kind: "webhook"; url: string } {
  if (!isObject(v)) throw invalid("webhook", `must be an object {"url"}, got ${show(v)}`);
  only(v, ["url"], "webhook.");
  const url = v["url"];
  if (typeof url !== "string") throw invalid("webhook.url", `required: a string, got ${show(url)}`);
  if (url.length > SUBSCRIPTION_LIMITS.urlChars)
    throw invalid("webhook.url", `must be at most ${SUBSCRIPTION_LIMITS.urlChars} characters`);
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw invalid("webhook.url", `is not a URL: ${show(url)}`);
  }
  if (u.protocol !== "https:" && u.protocol !== "http:")
    throw invalid("webhook.url", `must be http or https, got ${show(u.protocol)}`);
  if (u.username !== "" || u.password !== "")
    throw invalid("webhook.url", "must not carry credentials (the POSTs are signed instead)");
  return { kind: "webhook", url: u.href };
}

function parseEmail(v: unknown): { kind: "email"; to: string } {
  if (!isObject(v)) throw invalid("email", `must be an object {"to"}, got ${show(v)}`);
  only(v, ["to"], "email.");
  const to = v["to"];
  if (typeof to !== "string") throw invalid("email.to", `required: a string, got ${show(to)}`);
  if (to.length > SUBSCRIPTION_LIMITS.emailChars || !EMAIL_ADDRESS.test(to))
    throw invalid(
      "email.to",
      `must be one address local@domain (at most ${SUBSCRIPTION_LIMITS.emailChars} characters, no name or list), got ${show(to)}`,
    );
  return { kind: "email", to };
}

/** Parses a create body (already JSON-parsed). */
export function parseSubscriptionBody(body: unknown): SubscriptionInput {
  if (!isObject(body)) throw invalid("body", `must be a JSON object, got ${show(body)}`);
  only(body, ["events", "job_id", "webhook", "email"], "");
  const events = parseEvents(body["events"]);
  const jobId = body["job_id"];
  if (jobId !== undefined && jobId !== null && (typeof jobId !== "string" || !JOB_ID.test(jobId)))
    throw invalid(
      "job_id",
      `must be a job id ([A-Za-z0-9_-], 1-64 characters), got ${show(jobId)}`,
    );
  const hasWebhook = body["webhook"] !== undefined;
  const hasEmail = body["email"] !== undefined;
  if (hasWebhook === hasEmail)
    throw invalid(
      hasWebhook ? "email" : "webhook",
      hasWebhook
        ? "give either webhook or email, not both"
        : 'required: one of webhook {"url"} or email {"to"}',
    );
  const channel = hasWebhook ? parseWebhook(body["webhook"]) : parseEmail(body["email"]);
  return { events, job_id: typeof jobId === "string" ? jobId : null, channel };
}
