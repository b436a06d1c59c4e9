/**
 * Where a responder may answer (pure): every Kairos responder — the partition owner on
 * `kairos.<c>.p.<n>` and on the worker plane, the internal NATS API on `kairos.<c>.api.<t>.>`, a
 * worker answering offers and probes — asks `replyRefusal` before it publishes a reply, and drops
 * the request unanswered (counted, logged) when it refuses.
 *
 * Why the server does not do this alone: a request's reply subject is chosen by the REQUESTER, and
 * nats-server lets a responder publish to it — under `allow_responses`, whatever the responder's
 * own publish permissions say, and without it whenever the responder's allow list covers the
 * subject. An API node's allow list holds `$JS.API.…` and `$KV.…` subjects (it reads and writes
 * buckets), so a tenant's service asking with reply `$JS.API.STREAM.PURGE.KV_<c>_idem` had the API
 * node purge a stream, and a reply `$KV.<c>_tenants.t.<other>` overwrote another tenant's record.
 * The only reply a Kairos requester ever waits for is on its own inbox, so anything else is refused.
 *
 * The rule: the reply must be an inbox of the per-user form `_INBOX_<user>.<token>[.<token>…]`
 * (nats-permissions.ts `inboxPrefixFor`; the only inbox a user may subscribe to), and `<user>` must
 * be an identity that may send this request:
 *
 * | request (`Asker`) | accepted inbox owners |
 * | --- | --- |
 * | `actor_command`: `kairos.<c>.p.<n>` | role sets with `api` or `scheduler`; `admin` |
 * | `worker`: the worker plane, naming worker W | `worker-<W>` (pinned to W); role sets with `worker` (shared); `admin` |
 * | `service`: the NATS API of tenant T | `service-<name>`; `admin` |
 * | `scheduler`: an offer or probe to a worker | role sets with `scheduler`; `admin` |
 *
 * NATS does not tell a responder who sent a message, so within a class the check cannot name the
 * sender: a holder of shared worker credentials can still direct a reply into another shared
 * worker identity's inbox (where nothing waits for it). A pinned worker's reply must be its own.
 * A tenant's service users are all `service-<name>`: which tenant a name belongs to is in the
 * server's config only, so one tenant's service can direct its own reply into another service's
 * inbox (that inbox then receives a reply about the first tenant's request, nothing more).
 *
 * Imported requests (`_R_.<token>…`): a tenant service lives in the SERVICES account
 * (nats-accounts.ts) and reaches the NATS API through a service import; nats-server replaces its
 * reply subject with one of its own making, `_R_.…` in the cluster account, and maps the answer
 * back to the service's inbox in SERVICES. Such a reply is accepted for `service` requests only:
 * nobody in the cluster account may subscribe to `_R_.…`, and what is published there goes back
 * across the import or nowhere — never to a `$JS.API…`/`$KV…` subject of the cluster.
 *
 * `shared` inboxes (`_INBOX.<token>…`): a node without NATS credentials runs against a server
 * without authorization, where every client's inbox is `_INBOX`; there, and only there, such a
 * reply is accepted (the simulation's bus works so too). With credentials it is refused: nobody
 * may subscribe to `_INBOX.>`, so nothing honest waits there.
 */
import type { Role } from "./config.ts";
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
  | { kind: "scheduler" };

/**
 * `per_user`: the responder's node has NATS credentials (the server has authorization on, every
 * inbox is `_INBOX_<user>`); `shared`: it has none (the server has no authorization).
 */
export type InboxMode = "per_user" | "shared";

/** The inbox mode of a node with these NATS auth options (credentials file or none). */
export function inboxModeFor(auth: { readonly credsFile?: string | undefined }): InboxMode {
  return auth.credsFile === undefined ? "shared" : "per_user";
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
  if (user.startsWith(PINNED_PREFIX)) return user.length > PINNED_PREFIX.length ? { kind: "pinned_worker", workerId: user.slice(PINNED_PREFIX.length) } : { kind: "unknown" };
  if (user.startsWith(SERVICE_PREFIX)) return user.length > SERVICE_PREFIX.length ? { kind: "service", name: user.slice(SERVICE_PREFIX.length) } : { kind: "unknown" };
  const parts = user.split("_");
  if (!parts.every((p): p is Role => (ROLES as readonly string[]).includes(p))) return { kind: "unknown" };
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
 * the module header for the rule; `mode` is the responder's own (`inboxModeFor`).
 */
export function replyRefusal(reply: string | undefined, asker: Asker, mode: InboxMode): ReplyRefusal | undefined {
  if (reply === undefined || reply === "") return { reason: "no_reply", detail: "no reply subject" };
  if (reply.length > MAX_REPLY_LENGTH) return { reason: "not_an_inbox", detail: `reply subject of ${reply.length} characters` };
  const imported = IMPORTED_RE.exec(reply);
  if (imported) {
    if (asker.kind === "service" && TOKENS_RE.test(imported[1]!)) return undefined;
    return { reason: "not_the_asker", detail: `reply ${show(reply)} is an imported request's reply; only NATS API requests come through an import` };
  }
  const shared = SHARED_RE.exec(reply);
  if (shared) {
    if (mode === "shared" && TOKENS_RE.test(shared[1]!)) return undefined;
    return { reason: "not_an_inbox", detail: `reply ${show(reply)} is the shared inbox (only per-user inboxes ${inboxPrefixFor("<user>")}.… are answered)` };
  }
  const m = USER_RE.exec(reply);
  if (!m || !TOKENS_RE.test(m[2]!)) return { reason: "not_an_inbox", detail: `reply ${show(reply)} is not an inbox` };
  if (!mayAsk(ownerOf(m[1]!), asker)) return { reason: "not_the_asker", detail: `reply ${show(reply)} is the inbox of "${m[1]!}", which may not send ${describe(asker)}` };
  return undefined;
}

function describe(a: Asker): string {
  switch (a.kind) {
    case "actor_command":
      return "actor commands";
    case "scheduler":
      return "offers or probes to workers";
    case "service":
      return `NATS API requests of tenant ${show(a.tenantId)}`;
    case "worker":
      return `worker-plane messages of worker ${a.workerIds.length === 0 ? "(none named)" : show([...new Set(a.workerIds)].join(","))}`;
  }
}
