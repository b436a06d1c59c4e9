/**
 * Dead-letter notifications: an HMAC-signed POST to the tenant's webhook when a run is
 * dead-lettered. Body `{"type": "run.dead_lettered", "run": <run as the API shows it>}`; header
 * `Kairos-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>` (verify it and
 * reject old timestamps to stop replays). At-least-once: up to `attempts` tries with backoff, then
 * logged; a receiver should dedupe on `run.run_id`.
 */
import { createHmac } from "node:crypto";
import type { RunView } from "./model.ts";

export function signWebhook(secret: string, timestampS: number, body: string): string {
  return `t=${timestampS},v1=${createHmac("sha256", secret).update(`${timestampS}.${body}`).digest("hex")}`;
}

export interface WebhookTarget {
  url: string;
  secret: string;
}

export async function notifyDeadLetter(
  target: WebhookTarget,
  run: RunView,
  opts: { nowS: () => number; attempts?: number; timeoutMs?: number; sleep: (ms: number) => Promise<void> },
): Promise<{ ok: boolean; status?: number; error?: string }> {
  const body = JSON.stringify({ type: "run.dead_lettered", run });
  let last: { ok: boolean; status?: number; error?: string } = { ok: false, error: "not sent" };
  for (let i = 0; i < (opts.attempts ?? 3); i++) {
    if (i > 0) await opts.sleep(500 * 2 ** (i - 1));
    try {
      const res = await fetch(target.url, {
        method: "POST",
        headers: { "content-type": "application/json", "kairos-signature": signWebhook(target.secret, opts.nowS(), body) },
        body,
        signal: AbortSignal.timeout(opts.timeoutMs ?? 5000),
      });
      await res.body?.cancel();
      if (res.ok) return { ok: true, status: res.status };
      last = { ok: false, status: res.status };
      if (res.status >= 400 && res.status < 500 && res.status !== 429) return last;
    } catch (e) {
      last = { ok: false, error: e instanceof Error ? e.message : String(e) };
    }
  }
  return last;
}
