/**
 * Where a responder may answer (pure). Every Kairos responder — partition owners, the worker
 * plane, the internal NATS API, workers answering offers and probes — asks `replyRefusal` before
 * replying, and drops the request unanswered (counted, logged) when it refuses.
 *
 * Why: the REQUESTER picks the reply subject, and nats-server lets a responder publish to it, so
 * a forged reply could have an API node purge a stream or overwrite another tenant's record. The
 * rule: the reply is the per-user inbox `_INBOX_<user>.…` of an identity that may ask (`Asker`);
 * `_INBOX.…` only without authorization; `_R_.…` (a request that crossed an import) only for
 * `service` requests and `worker` requests whose `Nats-Request-Info` names WORKERS and the worker.
 *
 * Pitfalls: within one account NATS names no sender, so within a class (shared worker credentials,
 * service users of different tenants) a reply can be aimed at a peer's inbox; the header is
 * trusted only on `_R_.…` replies (the server writes it there, overwriting a client's own).
 */
import type { Role } from "./config.ts";
import { WORKERS_ACCOUNT } from "./nats-accounts.ts";
import { NATS_ADMIN, inboxPrefixFor, natsUserFor, pinnedWorkerUser } from "./nats-permissions.ts";

/** Who may have sent the request a responder is about to answer. */
export type Asker =
  /** An actor command (`kairos.<c>.p.<n>`): api and scheduler identities. */
  | { kind: "actor_command" }
  /** A worker-plane message (heartbeats, completions) naming these worker ids (all must be one identity's). */
  | { kind: "worker"; workerIds: readonly string[] }
  /** A request on the NATS API subjects of `tenantId`: that tenant's services. */
  | { kind: "service"; tenantId: string }
  /** An offer or probe a worker answers: scheduler identities. */
  | { kind: "scheduler" }
  /** A read an API node asks of a scheduler (a tenant's live figures): api identities. */
  | { kind: "api_read" };

/**
 * `per_user`: the responder's node has NATS credentials (the server has authorization on, every
 * inbox is `_INBOX_<user>`); `shared`: it has none (the server has no authorization).
 */
export type InboxMode = "per_user" | "shared";

/** The inbox mode of a node with these NATS auth options (credentials file or none). */
export function inboxModeFor(auth: { readonly credsFile?: string | undefined }): InboxMode {
  return auth.credsFile === undefined ? "shared" : "per_user";
}

/** The header nats-server puts on a request crossing a service import declared with `share: true`. */
export const REQUEST_INFO_HEADER = "Nats-Request-Info";

/** Who sent a request that crossed a service import: the header's `acc` and `user`. */
export interface Requester {
  account: string;
  user: string;
}

/** A longer header is not one nats-server wrote (its client info is a few hundred bytes). */
const MAX_REQUEST_INFO_LENGTH = 4096;

/** The requester a `Nats-Request-Info` header names (undefined: absent, malformed, or without a user). */
export function requesterOf(header: string | undefined): Requester | undefined {
  if (header === undefined || header.length === 0 || header.length > MAX_REQUEST_INFO_LENGTH)
    return undefined;
  let v: unknown;
  try {
    v = JSON.parse(header);
  } catch {
    return undefined;
  }
  if (v === null || typeof v !== "object") return undefined;
  const { acc, user } = v as { acc?: unknown; user?: unknown };
  return typeof acc === "string" && typeof user === "string" && acc !== "" && user !== ""
    ? { account: acc, user }
    : undefined;
}

export type ReplyRefusalReason = "no_reply" | "not_an_inbox" | "not_the_asker";

export interface ReplyRefusal {
  reason: ReplyRefusalReason;
  /** A sentence for the log (the subject, bounded). */
  detail: string;
}

/** The identity owning a per-user inbox. */
type InboxOwner =
  | { kind: "admin" }
  | { kind: "roles"; roles: ReadonlySet<Role> }
  | { kind: "pinned_worker"; workerId: string }
  | { kind: "service"; name: string }
  | { kind: "unknown" };

const ROLES: readonly Role[] = ["api", "scheduler", "worker"];
const USER_RE = /^_INBOX_([A-Za-z0-9_-]{1,80})\.(.+)$/;
const SHARED_RE = /^_INBOX\.(.+)$/;
/** A reply subject nats-server made for a request that crossed a service import. */
const IMPORTED_RE = /^_R_\.(.+)$/;
/** A reply's tokens after the prefix: non-empty, printable, no wildcard. */
const TOKENS_RE = /^[^\s.*>]+(\.[^\s.*>]+)*$/;
/** Longer subjects are not inboxes Kairos makes (prefix + nuid + token is well under this). */
const MAX_REPLY_LENGTH = 256;

const SERVICE_PREFIX = "service-";
const PINNED_PREFIX = pinnedWorkerUser("");

function ownerOf(user: string): InboxOwner {
  if (user === NATS_ADMIN) return { kind: "admin" };
  if (user.startsWith(PINNED_PREFIX))
    return user.length > PINNED_PREFIX.length
      ? { kind: "pinned_worker", workerId: user.slice(PINNED_PREFIX.length) }
      : { kind: "unknown" };
  if (user.startsWith(SERVICE_PREFIX))
    return user.length > SERVICE_PREFIX.length
      ? { kind: "service", name: user.slice(SERVICE_PREFIX.length) }
      : { kind: "unknown" };
  const parts = user.split("_");
  if (!parts.every((p): p is Role => (ROLES as readonly string[]).includes(p)))
    return { kind: "unknown" };
  // Exactly the user natsUserFor names for that set (sorted, no repeats): no other spelling.
  if (natsUserFor(parts) !== user) return { kind: "unknown" };
  return { kind: "roles", roles: new Set(parts) };
}

function mayAsk(owner: InboxOwner, asker: Asker): boolean {
  if (owner.kind === "admin") return true;
  if (owner.kind === "unknown") return false;
  switch (asker.kind) {
    case "actor_command":
      return owner.kind === "roles" && (owner.roles.has("api") || owner.roles.has("scheduler"));
    case "scheduler":
      return owner.kind === "roles" && owner.roles.has("scheduler");
    case "api_read":
      return owner.kind === "roles" && owner.roles.has("api");
    case "service":
      return owner.kind === "service";
    case "worker":
      if (owner.kind === "roles") return owner.roles.has("worker");
      return owner.kind === "pinned_worker" && asker.workerIds.every((w) => w === owner.workerId);
  }
}

const show = (s: string) => JSON.stringify(s.length > 120 ? `${s.slice(0, 120)}…` : s);

/**
 * Why a responder must not answer a request with this `reply` subject (undefined: it may). See
 * the module header for the rule; `mode` is the responder's own (`inboxModeFor`); `requestInfo`
 * reads the request's `Nats-Request-Info` header (called only for an imported request's reply).
 */
export function replyRefusal(
  reply: string | undefined,
  asker: Asker,
  mode: InboxMode,
  requestInfo?: () => string | undefined,
): ReplyRefusal | undefined {
  if (reply === undefined || reply === "")
    return { reason: "no_reply", detail: "no reply subject" };
  if (reply.length > MAX_REPLY_LENGTH)
    return { reason: "not_an_inbox", detail: `reply subject of ${reply.length} characters` };
  const imported = IMPORTED_RE.exec(reply);
  if (imported) {
    if (!TOKENS_RE.test(imported[1]!))
      return { reason: "not_an_inbox", detail: `reply ${show(reply)} is not an inbox` };
    return importRefusal(reply, asker, requesterOf(requestInfo?.()));
  }
  const shared = SHARED_RE.exec(reply);
  if (shared) {
    if (mode === "shared" && TOKENS_RE.test(shared[1]!)) return undefined;
    return {
      reason: "not_an_inbox",
      detail: `reply ${show(reply)} is the shared inbox (only per-user inboxes ${inboxPrefixFor("<user>")}.… are answered)`,
    };
  }
  const m = USER_RE.exec(reply);
  if (!m || !TOKENS_RE.test(m[2]!))
    return { reason: "not_an_inbox", detail: `reply ${show(reply)} is not an inbox` };
  if (!mayAsk(ownerOf(m[1]!), asker))
    return {
      reason: "not_the_asker",
      detail: `reply ${show(reply)} is the inbox of "${m[1]!}", which may not send ${describe(asker)}`,
    };
  return undefined;
}

/** Whether a request that came through an import (reply `_R_.…`) may be answered: see the module header. */
function importRefusal(
  reply: string,
  asker: Asker,
  requester: Requester | undefined,
): ReplyRefusal | undefined {
  switch (asker.kind) {
    case "service":
      return undefined;
    case "actor_command":
    case "scheduler":
    case "api_read":
      return {
        reason: "not_the_asker",
        detail: `reply ${show(reply)} is an imported request's reply; ${describe(asker)} do not come through a service import`,
      };
    case "worker":
      break;
  }
  if (requester === undefined)
    return {
      reason: "not_the_asker",
      detail: `reply ${show(reply)} is an imported request's reply without a ${REQUEST_INFO_HEADER} header naming its sender`,
    };
  const owner = ownerOf(requester.user);
  // Only worker identities live in WORKERS (`admin` is in KAIROS): the owner must be one of them.
  if (
    requester.account !== WORKERS_ACCOUNT ||
    (owner.kind !== "pinned_worker" && owner.kind !== "roles") ||
    !mayAsk(owner, asker)
  ) {
    return {
      reason: "not_the_asker",
      detail: `${show(requester.user)} of account ${show(requester.account)} may not send ${describe(asker)}`,
    };
  }
  return undefined;
}

function describe(a: Asker): string {
  switch (a.kind) {
    case "actor_command":
      return "actor commands";
    case "scheduler":
      return "offers or probes to workers";
    case "api_read":
      return "reads of a tenant's live figures";
    case "service":
      return `NATS API requests of tenant ${show(a.tenantId)}`;
    case "worker":
      return `worker-plane messages of worker ${a.workerIds.length === 0 ? "(none named)" : show([...new Set(a.workerIds)].join(","))}`;
  }
}
