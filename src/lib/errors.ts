/**
 * The error catalogue. Every error Kairos raises across a module boundary is a `KairosError`
 * with a stable `code` (branch on it, never on the message), a `retryable` flag and an
 * optional `field` naming the offending input. HTTP maps codes to statuses in one place.
 */
export const ErrorCodes = {
  invalid_argument: { retryable: false },
  invalid_schedule: { retryable: false },
  not_found: { retryable: false },
  conflict: { retryable: true },
  precondition_failed: { retryable: false },
  unauthenticated: { retryable: false },
  payload_too_large: { retryable: false },
  quota_exceeded: { retryable: true },
  /** An operator/tenant policy refuses the request (e.g. an image outside the tenant's image policy). */
  policy_denied: { retryable: false },
  /**
   * The bus refused a message its sender may not send: a worker-plane message that is not a
   * heartbeat or completion, or an actor message whose tenant is not the address's tenant.
   */
  permission_denied: { retryable: false },
  overloaded: { retryable: true },
  /** A per-tenant or per-client request limit (HTTP 429 with Retry-After from `retryAfterMs`). */
  rate_limited: { retryable: true },
  no_owner: { retryable: true },
  not_owner: { retryable: true },
  stale_fence: { retryable: false },
  lease_lost: { retryable: false },
  timeout: { retryable: true },
  unavailable: { retryable: true },
  unsupported: { retryable: false },
  internal: { retryable: false },
} as const;

export type ErrorCode = keyof typeof ErrorCodes;

export interface KairosErrorOptions {
  field?: string;
  cause?: unknown;
  retryable?: boolean;
  /** When retrying makes sense again (rate limits), in milliseconds from now. */
  retryAfterMs?: number;
}

/**
 * Answers of the cluster protocol, not faults: raised and answered at a high rate under load (a
 * burst's heartbeats of lost leases, moved actors), they carry no stack trace — capturing one
 * costs a saturated scheduler a fifth of its CPU in a burst. Their code and message
 * say everything.
 */
const PROTOCOL_ANSWERS: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  "not_owner",
  "no_owner",
  "stale_fence",
  "lease_lost",
  "overloaded",
]);

export class KairosError extends Error {
  override readonly name = "KairosError";
  readonly code: ErrorCode;
  readonly retryable: boolean;
  readonly field: string | undefined;
  readonly retryAfterMs: number | undefined;
  constructor(code: ErrorCode, message: string, opts: KairosErrorOptions = {}) {
    const limit = Error.stackTraceLimit;
    if (PROTOCOL_ANSWERS.has(code)) Error.stackTraceLimit = 0;
    try {
      super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    } finally {
      Error.stackTraceLimit = limit;
    }
    this.code = code;
    this.retryable = opts.retryable ?? ErrorCodes[code].retryable;
    this.field = opts.field;
    this.retryAfterMs = opts.retryAfterMs;
  }
  /** Plain form for the wire (NATS replies, HTTP bodies). */
  toJSON(): { code: ErrorCode; message: string; field?: string } {
    return this.field === undefined
      ? { code: this.code, message: this.message }
      : { code: this.code, message: this.message, field: this.field };
  }
}

export function isKairosError(e: unknown, code?: ErrorCode): e is KairosError {
  return e instanceof KairosError && (code === undefined || e.code === code);
}
