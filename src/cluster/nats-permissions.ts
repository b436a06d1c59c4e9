/**
 * Who may do what on the bus: the NATS subject permissions of each Kairos identity (pure). Every
 * subject Kairos uses is listed here per role (`api`, `scheduler`, `worker`, pinned
 * `worker-<id>`, `service-<name>`, `admin`); nothing else is allowed. docs/security.md has the
 * table of subjects and roles.
 *
 * KV access is the JetStream API of the bucket's stream and `$KV.<c>_<suffix>.<key>` publishes. A
 * worker-only identity gets two JetStream rights: the direct get of `cluster/config` and writes of
 * its own `nodes` record. API nodes write only `idem`, `jc.*`, the job catalogs (`jd.*`, `jl.*.*`),
 * `sk.>` and `sub.>` (run-event subscriptions) of the tenants bucket.
 * A service user may only publish requests on `kairos.<c>.api.<its tenant>.>`.
 *
 * Pitfall: replies go to a per-user inbox prefix (`_INBOX_<user>`), never the shared `_INBOX.>`
 * (which would let anyone read every reply), and because the requester picks the reply subject,
 * every responder also checks it (reply-guard.ts).
 */
import { BUCKET_SUFFIXES } from "./buckets.ts";
import type { Role } from "./config.ts";

/** Where nats-server sends auth callout requests (in the cluster account: nats-accounts.ts). */
export const AUTH_CALLOUT_SUBJECT = "$SYS.REQ.USER.AUTH";

export const NATS_ADMIN = "admin";

export interface SubjectPermissions {
  publish: { allow: string[]; deny?: string[] };
  subscribe: { allow: string[]; deny?: string[] };
  /** Responders may publish to the reply subject of each request they received (once). */
  allow_responses?: boolean;
}

/** The NATS user of a set of roles: `api`, `scheduler_worker`, … (roles sorted), or `admin`. */
export function natsUserFor(roles: readonly Role[] | typeof NATS_ADMIN): string {
  if (roles === NATS_ADMIN) return NATS_ADMIN;
  return [...new Set(roles)].sort().join("_");
}

/** The inbox prefix a user's replies go to (its permissions allow no other). */
export function inboxPrefixFor(user: string): string {
  return `_INBOX_${user}`;
}

const BUCKETS = BUCKET_SUFFIXES;
type Bucket = (typeof BUCKETS)[number];

/** The JetStream API subjects that read a KV bucket (get, list, watch). */
function readBucket(c: string, b: Bucket): string[] {
  const s = `KV_${c}_${b}`;
  return [
    `$JS.API.DIRECT.GET.${s}`,
    `$JS.API.DIRECT.GET.${s}.>`,
    `$JS.API.STREAM.MSG.GET.${s}`,
    `$JS.API.CONSUMER.CREATE.${s}`,
    `$JS.API.CONSUMER.CREATE.${s}.>`,
    `$JS.API.CONSUMER.DELETE.${s}.>`,
    `$JS.API.CONSUMER.INFO.${s}.>`,
    `$JS.FC.${s}.>`,
  ];
}

/** Publishing to `$KV.<bucket>.<key>` is a KV write (put, create, update, delete). */
function writeBucket(c: string, b: Bucket, keys: readonly string[] = [">"]): string[] {
  return keys.map((k) => `$KV.${c}_${b}.${k}`);
}

/**
 * Creating the cluster's buckets on first start (api and scheduler nodes; `kvm.create` asks for
 * the stream's info first and creates only when it is missing). Stream names are one subject
 * token, so no wildcard can stand for "every bucket of cluster c": each is listed.
 */
function createStreams(c: string): string[] {
  return BUCKETS.map((b) => `$JS.API.STREAM.CREATE.KV_${c}_${b}`);
}

interface Grant {
  pub: string[];
  sub: string[];
  responds: boolean;
}

function roleGrant(c: string, role: Role, workerId: string): Grant {
  const k = `kairos.${c}`;
  switch (role) {
    case "api":
      return {
        pub: [
          `${k}.p.*`,
          // The tenants' live figures, asked of each scheduler (src/server/stats-responder.ts).
          `${k}.stats.*`,
          ...createStreams(c),
          ...(["runs", "actors", "tenants", "idem"] as const).flatMap((b) => readBucket(c, b)),
          ...writeBucket(c, "idem"),
          ...writeBucket(c, "tenants", ["jc.*", "jd.*", "jl.*.*", "sk.>", "sub.>"]),
        ],
        // The internal NATS API: requests of every tenant's service users, answered once each; and
        // nats-server's auth callout, which admits service identities (src/nats-api/auth-callout.ts).
        sub: [`${k}.api.*.>`, AUTH_CALLOUT_SUBJECT],
        responds: true,
      };
    case "scheduler":
      return {
        pub: [
          `${k}.p.*`,
          `${k}.worker.*.start`,
          `${k}.worker.*.cancel`,
          `${k}.worker.*.probe`,
          ...createStreams(c),
          ...(["cluster", "leases", "actors", "runs", "tenants"] as const).flatMap((b) =>
            readBucket(c, b),
          ),
          ...(["cluster", "leases", "actors", "runs"] as const).flatMap((b) => writeBucket(c, b)),
          // Run retention and deleted jobs: old run records and a deleted job's state are purged.
          `$JS.API.STREAM.PURGE.KV_${c}_runs`,
          `$JS.API.STREAM.PURGE.KV_${c}_actors`,
        ],
        sub: [`${k}.p.*`, `${k}.w.*.*`, `${k}.adverts.*`, `${k}.stats.*`],
        responds: true,
      };
    case "worker":
      return {
        // Its own id's token only (`*` for a shared worker user): a pinned identity can neither
        // heartbeat, complete nor advertise for another worker; the owner checks that each
        // item names the subject's worker (src/server/partition-responder.ts), the directory each advert's.
        pub: [`${k}.w.*.${workerId}`, `${k}.adverts.${workerId}`],
        sub: [
          `${k}.worker.${workerId}.start`,
          `${k}.worker.${workerId}.cancel`,
          `${k}.worker.${workerId}.probe`,
        ],
        responds: true,
      };
  }
}

/** A worker user pinned to one worker id (`pinnedWorkerUser`): `worker-<id>`. */
export function pinnedWorkerUser(workerId: string): string {
  return `worker-${workerId}`;
}

export interface PermissionOptions {
  /**
   * Pins a worker user to one worker id: only its own start/cancel/probe subjects and its own `nodes`
   * record (default: any worker id, one shared `worker` user).
   */
  workerId?: string;
  /** The user's name, for its inbox prefix (default `natsUserFor(roles)`). */
  user?: string;
}

/** The permissions of a NATS user for a node with `roles` (a union of each role's) in cluster `c`. */
export function natsPermissions(
  c: string,
  roles: readonly Role[] | typeof NATS_ADMIN,
  opts: PermissionOptions = {},
): SubjectPermissions {
  const user = opts.user ?? natsUserFor(roles);
  const workerId = opts.workerId ?? "*";
  if (roles === NATS_ADMIN)
    return { publish: { allow: [">"] }, subscribe: { allow: [">"] }, allow_responses: true };
  const k = `kairos.${c}`;
  const workerOnly = !roles.includes("scheduler") && !roles.includes("api");
  const base: Grant = {
    pub: workerOnly
      ? // A worker reads one key and writes one (its own node record; `*` for a shared worker
        // user): no JetStream API info, no stream info (with a subject filter it lists any
        // bucket's keys), no consumer (a push consumer delivers where its creator says, as the
        // account), no key listing (buckets.ts, scope `worker`).
        [
          `$JS.API.DIRECT.GET.KV_${c}_cluster.$KV.${c}_cluster.config`,
          ...writeBucket(c, "nodes", [opts.workerId ?? "*"]),
        ]
      : [
          "$JS.API.INFO",
          ...BUCKETS.map((b) => `$JS.API.STREAM.INFO.KV_${c}_${b}`),
          ...readBucket(c, "cluster"),
          ...readBucket(c, "nodes"),
          ...writeBucket(c, "nodes"),
        ],
    sub: [`${inboxPrefixFor(user)}.>`, `${k}.node.hb.*`, `${k}.node.leave.*`],
    responds: false,
  };
  // Membership: a node speaks on `.s` when it has the scheduler role, else on `.n` (membership.ts).
  const voice = roles.includes("scheduler") ? "s" : "n";
  base.pub.push(`${k}.node.hb.${voice}`, `${k}.node.leave.${voice}`);
  const grants = [base, ...roles.map((r) => roleGrant(c, r, workerId))];
  const uniq = (xs: string[]) => [...new Set(xs)];
  const perms: SubjectPermissions = {
    publish: { allow: uniq(grants.flatMap((g) => g.pub)) },
    subscribe: { allow: uniq(grants.flatMap((g) => g.sub)) },
  };
  if (workerOnly) {
    // Spelled out for readers of the server config: a worker can neither command actors, nor
    // touch the tenants bucket, nor create consumers or read stream info (the allow list
    // already excludes all of them).
    perms.publish.deny = [
      `${k}.p.>`,
      `$KV.${c}_tenants.>`,
      `$KV.${c}_actors.>`,
      `$KV.${c}_runs.>`,
      "$JS.API.CONSUMER.>",
      "$JS.API.STREAM.>",
      "$JS.API.INFO",
    ];
  }
  if (grants.some((g) => g.responds)) perms.allow_responses = true;
  return perms;
}

/** The NATS user of a tenant's internal service `name` (`servicePermissions`): `service-<name>`. */
export function serviceUser(name: string): string {
  return `service-${name}`;
}

/**
 * The permissions of a tenant's service user in cluster `c`: requests to the NATS API of
 * `tenantId` only, replies on its own inbox. `allow_responses` is not granted: it answers nobody.
 */
export function servicePermissions(c: string, tenantId: string, user: string): SubjectPermissions {
  return {
    publish: { allow: [`kairos.${c}.api.${tenantId}.>`] },
    subscribe: { allow: [`${inboxPrefixFor(user)}.>`] },
  };
}

/** Every non-empty set of roles (7), for generating one user per combination a node may run. */
export function roleSets(): Role[][] {
  const all: Role[] = ["api", "scheduler", "worker"];
  const out: Role[][] = [];
  for (let mask = 1; mask < 1 << all.length; mask++)
    out.push(all.filter((_, i) => (mask >> i) & 1));
  return out;
}

export interface NatsUserEntry {
  user: string;
  password: string;
  permissions: SubjectPermissions;
}

/**
 * The nats-server `authorization` block for these users (JSON is valid nats-server config; every
 * string is quoted, so `$JS…` is not read as a variable).
 */
export function renderAuthorization(users: readonly NatsUserEntry[]): string {
  return `authorization: ${JSON.stringify({ users }, null, 2)}\n`;
}
