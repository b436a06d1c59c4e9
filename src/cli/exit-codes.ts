/**
 * The exit codes of the customer commands (`kairos jobs …`, `kairos runs …`), documented in
 * docs/cli.md: one per kind of failure a script can act on, and one per way a run can end for
 * `kairos runs wait`. Other commands exit 0, 1 (a bug) or 2 (anything they refuse).
 *
 * Gotcha: a run that ends `failed` or `timed_out` has spent its retries and is dead-lettered —
 * in Kairos every such run is; there is no dead-lettered run with another status, so
 * FAILED and TIMED_OUT are the dead-lettered outcomes.
 */
import type { ErrorCode } from "../lib/errors.ts";
import type { RunStatus } from "../protocol/model.ts";
import { assertNever } from "../lib/assert.ts";

export const EXIT = {
  /** Done; for `runs wait`, the run succeeded. */
  ok: 0,
  /** A bug in the CLI or the API (`internal`). */
  internal: 1,
  /** Bad flags or arguments, refused here or by the API (400 `invalid_argument`). */
  usage: 2,
  /** No API key, or the API refused it (401). */
  auth: 3,
  /** No such job or run (404) — also another tenant's. */
  notFound: 4,
  /** The API refused the request: conflict, If-Match, quota, image policy, body size (409/412/413/422). */
  refused: 5,
  /** The API could not be reached or could not answer: retry later (429, 503, timeout, refused connection). */
  unavailable: 6,
  /** `runs wait`: the run ended `failed` (dead-lettered). */
  runFailed: 10,
  /** `runs wait`: the run ended `timed_out` (dead-lettered). */
  runTimedOut: 11,
  /** `runs wait`: the run was `cancelled` (`runs cancel`, job paused or deleted, replaced by overlap). */
  runCancelled: 12,
  /**
   * `runs wait`: the run never executed: `skipped` (overlap), `missed` (misfire or starting
   * deadline) or `throttled` (a bounded backlog).
   */
  runNotRun: 13,
  /** `runs wait --timeout`: still not ended when the wait gave up. */
  waitTimedOut: 14,
} as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** The exit code of an error the API (or the CLI's own check) raised, by its code. */
export function exitCodeOfError(code: ErrorCode): ExitCode {
  switch (code) {
    case "invalid_argument":
    case "invalid_schedule":
      return EXIT.usage;
    case "unauthenticated":
    case "permission_denied":
      return EXIT.auth;
    case "not_found":
      return EXIT.notFound;
    case "conflict":
    case "precondition_failed":
    case "payload_too_large":
    case "quota_exceeded":
    case "policy_denied":
    case "unsupported":
      return EXIT.refused;
    case "rate_limited":
    case "overloaded":
    case "no_owner":
    case "not_owner":
    case "timeout":
    case "unavailable":
      return EXIT.unavailable;
    case "stale_fence":
    case "lease_lost":
    case "internal":
      return EXIT.internal;
    default:
      return assertNever(code);
  }
}

/** The exit code of `runs wait` for a run in a terminal status; undefined while it is active. */
export function exitCodeOfRun(status: RunStatus): ExitCode | undefined {
  switch (status) {
    case "succeeded":
      return EXIT.ok;
    case "failed":
      return EXIT.runFailed;
    case "timed_out":
      return EXIT.runTimedOut;
    case "cancelled":
      return EXIT.runCancelled;
    case "skipped":
    case "missed":
    case "throttled":
      return EXIT.runNotRun;
    case "queued":
    case "leased":
    case "running":
    case "retry_wait":
      return undefined;
    default:
      return assertNever(status);
  }
}
