/**
 * The email bound per tenant (pure, no I/O, no clock of its own): a tenant's first event opens a
 * window of `windowMs`; within it the first `maxPerWindow` events are mailed one by one, and every
 * later one is counted into a digest per recipient address, mailed when the window closes. So a
 * tenant's recipients get at most `maxPerWindow` event mails plus one digest per address per
 * window, however many runs fail at once — a top-of-the-hour storm of 200,000 failures is
 * `maxPerWindow` mails and a digest that counts the rest and lists the first `digestMaxListed`.
 *
 * The owner (mail.ts) closes a window with a timer armed when it opens (`admit` says `opened`).
 * Bounded: at most `maxTenants` open windows (a new tenant's event past it is dropped, counted by
 * the caller), at most `digestMaxListed` listed events per digest, one digest per address.
 */
import type { RunEventType } from "../protocol/events.ts";

export interface MailLimits {
  /** Event mails per tenant per window (the rest go to the digest). */
  readonly maxPerWindow: number;
  readonly windowMs: number;
  /** Events a digest lists by name (it counts all of them). */
  readonly digestMaxListed: number;
  /** Tenants with an open window at once. */
  readonly maxTenants: number;
}

/** One event as a mail or a digest line names it. */
export interface EventLine {
  type: RunEventType;
  run_id: string;
  job_id: string;
  scheduled_for: string;
  reason: string | null;
}

/** What a closed window owes one address: the events that were not mailed one by one. */
export interface Digest {
  tenantId: string;
  to: string;
  windowStartMs: number;
  windowEndMs: number;
  count: number;
  byType: Partial<Record<RunEventType, number>>;
  listed: EventLine[];
}

interface TenantWindow {
  startMs: number;
  sent: number;
  digests: Map<string, Digest>;
}

export type Admission =
  { kind: "send"; opened: boolean } | { kind: "digest" } | { kind: "dropped"; why: string };

export class MailLimiter {
  readonly limits: MailLimits;
  readonly #windows = new Map<string, TenantWindow>();

  constructor(limits: MailLimits) {
    this.limits = limits;
  }

  /** Open windows (tenants). */
  get open(): number {
    return this.#windows.size;
  }

  /** An event for `to` at `nowMs`: mail it now, hold it for the digest, or drop it. */
  admit(tenantId: string, to: string, line: EventLine, nowMs: number): Admission {
    const w = this.#windows.get(tenantId);
    if (w === undefined) {
      if (this.#windows.size >= this.limits.maxTenants)
        return {
          kind: "dropped",
          why: `more than ${this.limits.maxTenants} tenants mailed within one window`,
        };
      this.#windows.set(tenantId, { startMs: nowMs, sent: 1, digests: new Map() });
      return { kind: "send", opened: true };
    }
    if (w.sent < this.limits.maxPerWindow) {
      w.sent++;
      return { kind: "send", opened: false };
    }
    let d = w.digests.get(to);
    if (d === undefined) {
      d = {
        tenantId,
        to,
        windowStartMs: w.startMs,
        windowEndMs: w.startMs + this.limits.windowMs,
        count: 0,
        byType: {},
        listed: [],
      };
      w.digests.set(to, d);
    }
    d.count++;
    d.byType[line.type] = (d.byType[line.type] ?? 0) + 1;
    if (d.listed.length < this.limits.digestMaxListed) d.listed.push(line);
    return { kind: "digest" };
  }

  /** Closes the tenant's window: the digests it owes (none when every event was mailed). */
  close(tenantId: string): Digest[] {
    const w = this.#windows.get(tenantId);
    this.#windows.delete(tenantId);
    return w === undefined ? [] : [...w.digests.values()];
  }
}
