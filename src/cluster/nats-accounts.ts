/**
 * The NATS account layout of a Kairos deployment (pure): which account each identity lives in and
 * what crosses between them; rendered into the server config by src/dev/nats-auth-files.ts.
 * - `KAIROS` (the cluster's): role sets with `api` or `scheduler`, `admin`; all buckets.
 * - `WORKERS`: worker-only identities (pinned `worker-<id>`, the shared `worker`); no JetStream;
 *   joined to KAIROS by the worker protocol's subject families only (`workerCrossings`).
 * - `SERVICES`: tenant services (static, or admitted by the auth callout); no JetStream; imports
 *   `kairos.<c>.api.>` only. `SYS`: `sys`, for operators (revocation kicks connections).
 *
 * Why accounts: within one account a responder publishes to whatever reply subject the requester
 * chose; across a service import the reply is the server's own (`_R_.…`), and an account without
 * JetStream reaches no bucket whatever its users' permissions say. Each crossing's shape and why
 * (worker requests: `share: true` service imports; offers, adverts, membership: streams; not
 * `node.hb.*` both ways, a cycle): docs/security.md, "Accounts". Every export names its importer.
 */

import { AUTH_CALLOUT_SUBJECT, inboxPrefixFor, natsUserFor, roleSets } from "./nats-permissions.ts";

/** Where nats-server sends auth callout requests (in `CLUSTER_ACCOUNT`). */
export { AUTH_CALLOUT_SUBJECT };

/** The cluster's account: JetStream, every role set with `api` or `scheduler`, `admin`. */
export const CLUSTER_ACCOUNT = "KAIROS";
/** Worker-only identities: the worker protocol's subjects only, through imports; no JetStream. */
export const WORKERS_ACCOUNT = "WORKERS";
/** Tenant services: imports the NATS API only; no JetStream. */
export const SERVICES_ACCOUNT = "SERVICES";
/** nats-server's system account (`$SYS.REQ.SERVER.…`: CONNZ, KICK). */
export const SYSTEM_ACCOUNT = "SYS";
/** The one user of the system account. */
export const SYS_USER = "sys";
/**
 * How long nats-server waits for a callout answer before refusing the connection (the server's
 * `authorization.timeout`, seconds); also how long after a revocation a callout admitted just
 * before it can still complete (src/cli/service-revoke.ts sweeps again after it).
 */
export const AUTH_TIMEOUT_S = 2;

/** One static user in the config (password in clear: the file is 0600). */
export interface AccountUser {
  user: string;
  password: string;
  permissions: unknown;
}

export interface AccountLayout {
  /** Kairos cluster names whose NATS API is exported to SERVICES. */
  clusters: readonly string[];
  cluster: readonly AccountUser[];
  /** Worker-only identities (pinned `worker-<id>`, the shared `worker`): the WORKERS account. */
  workers: readonly AccountUser[];
  services: readonly AccountUser[];
  sys: AccountUser;
  /** The public account nkey (`A…`) that signs the callout's answers. */
  calloutIssuer: string;
  /** The public curve key (`X…`) the server seals callout requests to (they carry secrets). */
  calloutXkey: string;
}

/** The NATS API subject tree of cluster `c` that crosses from KAIROS to SERVICES. */
export function exportedApi(c: string): string {
  return `kairos.${c}.api.>`;
}

type Export =
  | { service: string; response_type?: "singleton"; accounts: string[] }
  | { stream: string; accounts: string[] };
type Import =
  | { service: { account: string; subject: string }; share: true }
  | { stream: { account: string; subject: string } };

/**
 * The reply inboxes of the identities that send offers and probes to workers (role sets with
 * `scheduler`): the only inboxes a worker's answer may reach in KAIROS.
 */
export function schedulerInboxes(): string[] {
  return roleSets()
    .filter((r) => r.includes("scheduler"))
    .map((r) => inboxPrefixFor(natsUserFor(r)));
}

/** What crosses between KAIROS and WORKERS for cluster `c` (see the module header). */
export function workerCrossings(c: string): {
  cluster: { exports: Export[]; imports: Import[] };
  workers: { exports: Export[]; imports: Import[] };
} {
  const k = `kairos.${c}`;
  const fromKairos = {
    services: [
      `${k}.w.*.*`,
      `$JS.API.DIRECT.GET.KV_${c}_cluster.$KV.${c}_cluster.config`,
      `$KV.${c}_nodes.*`,
    ],
    streams: [
      `${k}.node.hb.s`,
      `${k}.node.leave.s`,
      `${k}.worker.*.start`,
      `${k}.worker.*.cancel`,
      `${k}.worker.*.probe`,
    ],
  };
  const fromWorkers = {
    services: [],
    streams: [`${k}.adverts.*`, `${k}.node.hb.n`, `${k}.node.leave.n`],
  };
  const exports = (f: { services: string[]; streams: string[] }, to: string): Export[] => [
    ...f.services.map((service): Export => ({
      service,
      response_type: "singleton",
      accounts: [to],
    })),
    ...f.streams.map((stream): Export => ({ stream, accounts: [to] })),
  ];
  const imports = (f: { services: string[]; streams: string[] }, account: string): Import[] => [
    ...f.services.map((subject): Import => ({ service: { account, subject }, share: true })),
    ...f.streams.map((subject): Import => ({ stream: { account, subject } })),
  ];
  return {
    cluster: {
      exports: exports(fromKairos, WORKERS_ACCOUNT),
      imports: imports(fromWorkers, WORKERS_ACCOUNT),
    },
    workers: {
      exports: exports(fromWorkers, CLUSTER_ACCOUNT),
      imports: imports(fromKairos, CLUSTER_ACCOUNT),
    },
  };
}

/** The answers to offers and probes: WORKERS → KAIROS, into the schedulers' inboxes only (every cluster's). */
function schedulerReplyCrossings(): { exports: Export[]; imports: Import[] } {
  const subjects = schedulerInboxes().map((i) => `${i}.>`);
  return {
    exports: subjects.map((stream): Export => ({ stream, accounts: [CLUSTER_ACCOUNT] })),
    imports: subjects.map((subject): Import => ({ stream: { account: WORKERS_ACCOUNT, subject } })),
  };
}

/**
 * The nats-server config blocks `accounts`, `system_account` and `authorization` (JSON values,
 * valid nats-server config; every string is quoted, so `$SYS…` is not read as a variable).
 * Every static user is in `auth_users`: only other users go to the callout.
 */
export function renderAccounts(l: AccountLayout): string {
  const crossings = l.clusters.map(workerCrossings);
  const replies = schedulerReplyCrossings();
  const accounts = {
    [CLUSTER_ACCOUNT]: {
      jetstream: "enabled",
      users: l.cluster,
      exports: [
        ...l.clusters.map((c): Export => ({
          service: exportedApi(c),
          response_type: "singleton",
          accounts: [SERVICES_ACCOUNT],
        })),
        ...crossings.flatMap((x) => x.cluster.exports),
      ],
      imports: [...crossings.flatMap((x) => x.cluster.imports), ...replies.imports],
    },
    [WORKERS_ACCOUNT]: {
      users: l.workers,
      exports: [...crossings.flatMap((x) => x.workers.exports), ...replies.exports],
      imports: crossings.flatMap((x) => x.workers.imports),
    },
    [SERVICES_ACCOUNT]: {
      users: l.services,
      imports: l.clusters.map((c) => ({
        service: { account: CLUSTER_ACCOUNT, subject: exportedApi(c) },
      })),
    },
    [SYSTEM_ACCOUNT]: { users: [l.sys] },
  };
  const authorization = {
    timeout: AUTH_TIMEOUT_S,
    auth_callout: {
      issuer: l.calloutIssuer,
      xkey: l.calloutXkey,
      account: CLUSTER_ACCOUNT,
      auth_users: [...l.cluster, ...l.workers, ...l.services, l.sys].map((u) => u.user),
    },
  };
  return [
    `accounts: ${JSON.stringify(accounts, null, 2)}`,
    `system_account: ${JSON.stringify(SYSTEM_ACCOUNT)}`,
    `authorization: ${JSON.stringify(authorization, null, 2)}`,
    "",
  ].join("\n");
}
