/**
 * The NATS account layout of a Kairos deployment (pure): which account each identity lives in and
 * what crosses between them; rendered into the server config by src/dev/nats-auth-files.ts.
 * - `KAIROS` (the cluster's): every role set, pinned workers, `admin`; all buckets; exports the
 *   service `kairos.<c>.api.>`.
 * - `SERVICES`: tenant services (static, or admitted by the auth callout); no JetStream; imports
 *   `kairos.<c>.api.>` only.
 * - `SYS`: `sys`, for operators (revocation kicks connections).
 *
 * Why accounts and not only permissions: within one account a responder publishes to whatever
 * reply subject the requester chose, so a service could steer an API node's answer onto a
 * `$JS.API…`/`$KV…` subject. Across a service import the reply subject is the server's own
 * (`_R_.…`), mapped back to the requester's inbox. Users not in the static list go to the auth
 * callout (src/nats-api/auth-callout.ts), answered by API nodes.
 */

/** The cluster's account: JetStream, every Kairos role, `admin`. */
export const CLUSTER_ACCOUNT = "KAIROS";
/** Tenant services: imports the NATS API only; no JetStream. */
export const SERVICES_ACCOUNT = "SERVICES";
/** nats-server's system account (`$SYS.REQ.SERVER.…`: CONNZ, KICK). */
export const SYSTEM_ACCOUNT = "SYS";
/** The one user of the system account. */
export const SYS_USER = "sys";
/** Where nats-server sends auth callout requests (in `CLUSTER_ACCOUNT`). */
export const AUTH_CALLOUT_SUBJECT = "$SYS.REQ.USER.AUTH";
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

/**
 * The nats-server config blocks `accounts`, `system_account` and `authorization` (JSON values,
 * valid nats-server config; every string is quoted, so `$SYS…` is not read as a variable).
 * Every static user is in `auth_users`: only other users go to the callout.
 */
export function renderAccounts(l: AccountLayout): string {
  const accounts = {
    [CLUSTER_ACCOUNT]: {
      jetstream: "enabled",
      users: l.cluster,
      exports: l.clusters.map((c) => ({ service: exportedApi(c), response_type: "singleton" })),
    },
    [SERVICES_ACCOUNT]: {
      users: l.services,
      imports: l.clusters.map((c) => ({ service: { account: CLUSTER_ACCOUNT, subject: exportedApi(c) } })),
    },
    [SYSTEM_ACCOUNT]: { users: [l.sys] },
  };
  const authorization = {
    timeout: AUTH_TIMEOUT_S,
    auth_callout: {
      issuer: l.calloutIssuer,
      xkey: l.calloutXkey,
      account: CLUSTER_ACCOUNT,
      auth_users: [...l.cluster, ...l.services, l.sys].map((u) => u.user),
    },
  };
  return [
    `accounts: ${JSON.stringify(accounts, null, 2)}`,
    `system_account: ${JSON.stringify(SYSTEM_ACCOUNT)}`,
    `authorization: ${JSON.stringify(authorization, null, 2)}`,
    "",
  ].join("\n");
}
