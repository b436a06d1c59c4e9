/**
 * Run events by email, through the operator's SMTP server (`kairos node --smtp-url`): the mail
 * config (validated, frozen), the SMTP transport (nodemailer) behind a small port, and the
 * `Mailer`, which takes an event, applies the tenant's bound (mail-limit.ts: `maxPerWindow` event
 * mails per window, the rest in one digest per address when the window closes) and sends.
 *
 * `submit` never waits for the SMTP server: the outbox counts an email target delivered once the
 * Mailer has it. Sending is then best effort from memory: up to `sendAttempts` tries with backoff,
 * at most `maxInFlight` mails in flight or waiting on this node (past it a mail is dropped and
 * logged). A node that stops loses the digests of its open windows.
 *
 * Pitfall: the bound is per scheduler node (a tenant's jobs spread over the nodes holding their
 * partitions): a cluster of n schedulers sends a tenant at most n times the bound.
 */
import nodemailer from "nodemailer";
import type { Clock } from "../lib/clock.ts";
import { assertNever } from "../lib/assert.ts";
import { backoffMs } from "../lib/backoff.ts";
import { KairosError } from "../lib/errors.ts";
import { EMAIL_ADDRESS, type RunEventType } from "../protocol/events.ts";
import type { RunView } from "../protocol/model.ts";
import { MailLimiter, type Admission, type Digest } from "./mail-limit.ts";
import { digestMail, eventMail, type MailText } from "./mail-text.ts";

export interface MailConfig {
  /** `smtp://[user:pass@]host[:port]` (STARTTLS when offered) or `smtps://…` (TLS from the start). */
  readonly smtpUrl: string;
  /** The sender address (`local@domain`). */
  readonly from: string;
  /** Event mails per tenant per window (1-1000; default 10). */
  readonly maxPerWindow: number;
  /** The window (1 s to 24 h; default 10 minutes). */
  readonly windowMs: number;
  /** Events a digest lists by name (0-1000; default 50). */
  readonly digestMaxListed: number;
  /** Tenants with an open window at once (default 10,000). */
  readonly maxTenants: number;
  /** Mails being sent or waiting to be, on this node (default 200). */
  readonly maxInFlight: number;
  /** Tries per mail (1-10; default 3). */
  readonly sendAttempts: number;
  /** SMTP connection, greeting and socket timeouts (default 10 s). */
  readonly timeoutMs: number;
}

const DEFAULTS = {
  maxPerWindow: 10,
  windowMs: 600_000,
  digestMaxListed: 50,
  maxTenants: 10_000,
  maxInFlight: 200,
  sendAttempts: 3,
  timeoutMs: 10_000,
} as const;

/** Each bound: [min, max, the flag or field named in errors, its unit's divisor for the message]. */
const BOUNDS: Record<keyof typeof DEFAULTS, [number, number, string, number]> = {
  maxPerWindow: [1, 1000, "--mail-limit", 1],
  windowMs: [1000, 86_400_000, "--mail-window-s", 1000],
  digestMaxListed: [0, 1000, "mail.digestMaxListed", 1],
  maxTenants: [1, 1_000_000, "mail.maxTenants", 1],
  maxInFlight: [1, 100_000, "mail.maxInFlight", 1],
  sendAttempts: [1, 10, "mail.sendAttempts", 1],
  timeoutMs: [100, 600_000, "mail.timeoutMs", 1],
};

function bad(field: string, why: string): KairosError {
  return new KairosError("invalid_argument", `${field}: ${why}`, {
    field: field.replace(/^--/, ""),
  });
}

/** The validated, frozen mail config (`invalid_argument` naming the flag otherwise). */
export function mailConfig(o: Partial<MailConfig> & { smtpUrl: string }): MailConfig {
  let u: URL;
  try {
    u = new URL(o.smtpUrl);
  } catch {
    throw bad("--smtp-url", "is not a URL (smtp://host:port or smtps://host:port)");
  }
  if (u.protocol !== "smtp:" && u.protocol !== "smtps:")
    throw bad("--smtp-url", `must be smtp:// or smtps://, got ${u.protocol}//`);
  if (u.hostname === "") throw bad("--smtp-url", "names no host");
  if (u.pathname !== "" && u.pathname !== "/") throw bad("--smtp-url", "must have no path");
  const from = o.from;
  if (from === undefined) throw bad("--smtp-from", "required with --smtp-url: the sender address");
  if (from.length > 254 || !EMAIL_ADDRESS.test(from))
    throw bad(
      "--smtp-from",
      `must be one address local@domain, got ${JSON.stringify(from.slice(0, 80))}`,
    );
  const out: Record<string, unknown> = { smtpUrl: o.smtpUrl, from };
  for (const [k, [min, max, name, unit]] of Object.entries(BOUNDS)) {
    const key = k as keyof typeof DEFAULTS;
    const v = o[key] ?? DEFAULTS[key];
    if (!Number.isSafeInteger(v) || v < min || v > max)
      throw bad(
        name,
        `must be an integer from ${min / unit} to ${max / unit}, got ${String(v / unit)}`,
      );
    out[key] = v;
  }
  return Object.freeze(out as unknown as MailConfig);
}

/** One mail to send. */
export interface MailMessage extends MailText {
  from: string;
  to: string;
}

/** Where mails go (nodemailer over SMTP in production). */
export interface MailTransport {
  send(m: MailMessage): Promise<void>;
  close(): void;
}

/** The SMTP transport of `cfg` (nodemailer, a pool of at most 2 connections). */
export function smtpTransport(cfg: MailConfig): MailTransport {
  const u = new URL(cfg.smtpUrl);
  const secure = u.protocol === "smtps:";
  const t = nodemailer.createTransport({
    host: u.hostname.replace(/^\[|\]$/g, ""),
    port: u.port === "" ? (secure ? 465 : 587) : Number(u.port),
    secure,
    ...(u.username !== ""
      ? {
          auth: {
            user: decodeURIComponent(u.username),
            pass: decodeURIComponent(u.password),
          },
        }
      : {}),
    pool: true,
    maxConnections: 2,
    connectionTimeout: cfg.timeoutMs,
    greetingTimeout: cfg.timeoutMs,
    socketTimeout: cfg.timeoutMs,
  });
  return {
    async send(m) {
      await t.sendMail({
        from: m.from,
        to: m.to,
        subject: m.subject,
        text: m.text,
        headers: m.headers,
      });
    },
    close: () => t.close(),
  };
}

type Log = (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;

/** What a Mailer did (for metrics, logs and tests). */
export interface MailerStats {
  /** Event mails and digests handed to the SMTP server. */
  sent: number;
  digests: number;
  /** Events held for a digest. */
  held: number;
  /** Events or mails dropped (too many tenants, too many in flight). */
  dropped: number;
  /** Mails whose every try failed. */
  failed: number;
}

export class Mailer {
  readonly config: MailConfig;
  readonly #clock: Clock;
  readonly #log: Log;
  readonly #transport: MailTransport;
  readonly #limiter: MailLimiter;
  readonly #timers = new Map<string, () => void>();
  readonly stats: MailerStats = { sent: 0, digests: 0, held: 0, dropped: 0, failed: 0 };
  #inFlight = 0;
  #stopped = false;

  constructor(cfg: MailConfig, o: { clock: Clock; log: Log; transport?: MailTransport }) {
    this.config = cfg;
    this.#clock = o.clock;
    this.#log = o.log;
    this.#transport = o.transport ?? smtpTransport(cfg);
    this.#limiter = new MailLimiter(cfg);
  }

  /** Takes one event for `to`; never waits for the SMTP server. */
  submit(tenantId: string, to: string, type: RunEventType, run: RunView): Admission["kind"] {
    const line = {
      type,
      run_id: run.run_id,
      job_id: run.job_id,
      scheduled_for: run.scheduled_for,
      reason: run.reason,
    };
    const a = this.#limiter.admit(tenantId, to, line, this.#clock.now());
    switch (a.kind) {
      case "send":
        if (a.opened) this.#armClose(tenantId);
        this.#send({ ...eventMail(type, run), from: this.config.from, to }, tenantId);
        return a.kind;
      case "digest":
        this.stats.held++;
        return a.kind;
      case "dropped":
        this.stats.dropped++;
        this.#log("warn", "run-event mail dropped", { tenant_id: tenantId, why: a.why });
        return a.kind;
      default:
        return assertNever(a, "mail admission");
    }
  }

  /** Stops: no more timers or mails; open windows' digests are lost. */
  stop(): void {
    this.#stopped = true;
    for (const cancel of this.#timers.values()) cancel();
    this.#timers.clear();
    this.#transport.close();
  }

  #armClose(tenantId: string): void {
    this.#timers.set(
      tenantId,
      this.#clock.setTimer(this.config.windowMs, () => {
        this.#timers.delete(tenantId);
        for (const d of this.#limiter.close(tenantId)) this.#sendDigest(d);
      }),
    );
  }

  #sendDigest(d: Digest): void {
    this.stats.digests++;
    this.#send({ ...digestMail(d), from: this.config.from, to: d.to }, d.tenantId);
  }

  #send(m: MailMessage, tenantId: string): void {
    if (this.#stopped) return;
    if (this.#inFlight >= this.config.maxInFlight) {
      this.stats.dropped++;
      this.#log("warn", "run-event mail dropped: too many in flight", {
        tenant_id: tenantId,
        max_in_flight: this.config.maxInFlight,
      });
      return;
    }
    this.#inFlight++;
    this.#trySend(m, tenantId)
      .catch((e: unknown) => {
        this.stats.failed++;
        this.#log("warn", "run-event mail failed", { tenant_id: tenantId, err: String(e) });
      })
      .finally(() => this.#inFlight--);
  }

  async #trySend(m: MailMessage, tenantId: string): Promise<void> {
    for (let i = 0; ; i++) {
      try {
        await this.#transport.send(m);
        this.stats.sent++;
        return;
      } catch (e) {
        if (i + 1 >= this.config.sendAttempts || this.#stopped) throw e;
        this.#log("info", "run-event mail failed; will retry", {
          tenant_id: tenantId,
          err: String(e),
        });
        await new Promise<void>((r) =>
          this.#clock.setTimer(backoffMs(i, { baseMs: 1000, maxMs: 30_000 }), r),
        );
      }
    }
  }
}
