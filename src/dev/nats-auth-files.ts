/**
 * Writes a secured NATS set-up to a folder: `auth.conf` (the `accounts`, `system_account` and
 * `authorization` blocks of the layout in src/cluster/nats-accounts.ts, with the permissions of
 * nats-permissions.ts) and `creds/<user>.json` per user (mode 0600). Used by `kairos dev`,
 * `kairos nats-auth` and the test harness.
 *
 * Users: one per role set a node may run with `api` or `scheduler` (`api`, …,
 * `api_scheduler_worker`) and `admin` in `KAIROS`; `sys`; one pinned `worker-<id>` per worker id,
 * in `WORKERS`; static `service-<name>` users in SERVICES. The shared `worker` user (in `WORKERS`)
 * only on request (`sharedWorker`): its holder can speak for any worker. Each run makes fresh
 * 256-bit passwords, a callout issuer nkey (seed given to `api` users only) and a callout curve key.
 *
 * Pitfall: the server config holds passwords in clear: keep it 0600 (or use bcrypt hashes). The
 * issuer seed admits any user into SERVICES, never more.
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Role } from "../cluster/config.ts";
import { createAccount, createCurve } from "@nats-io/nkeys";
import type { NatsCredentials } from "../cluster/nats.ts";
import {
  NATS_ADMIN,
  inboxPrefixFor,
  natsPermissions,
  natsUserFor,
  pinnedWorkerUser,
  roleSets,
  serviceUser,
  servicePermissions,
  type NatsUserEntry,
  type SubjectPermissions,
} from "../cluster/nats-permissions.ts";
import { SYS_USER, renderAccounts } from "../cluster/nats-accounts.ts";

/** A tenant's internal service that speaks the NATS API (`kairos nats-auth --service name:tenant`). */
export interface ServiceIdentity {
  /** 1-48 of [A-Za-z0-9_-]; the user is `service-<name>`. */
  name: string;
  /** The tenant whose API subjects it may use (and no other's). */
  tenantId: string;
}

export interface NatsAuthFiles {
  /** The nats-server config file holding the `authorization` block (`-c` or `include`). */
  readonly configFile: string;
  /** Credentials file of each user (`admin`, `api`, `scheduler_worker`, …). */
  readonly creds: Readonly<Record<string, string>>;
  /** The credentials file for a node with these roles, or for `admin` (`worker` alone: only with `sharedWorker`). */
  credsFor(roles: readonly Role[] | typeof NATS_ADMIN): string;
  /** The credentials file of a worker user pinned to `workerId` (generated with `workers`). */
  credsForWorker(workerId: string): string;
  /** The credentials file of a tenant's service user (generated with `services`). */
  credsForService(name: string): string;
  /** The credentials file of `sys`, the system account's user (kicks revoked services' connections). */
  readonly sysCreds: string;
  /** The public account nkey that signs the auth callout's answers (`auth_callout.issuer`). */
  readonly calloutIssuer: string;
}

/** Merges the permissions of several clusters (a test server may host more than one). */
function union(ps: SubjectPermissions[]): SubjectPermissions {
  const all = (f: (p: SubjectPermissions) => string[] | undefined) => [
    ...new Set(ps.flatMap((p) => f(p) ?? [])),
  ];
  const deny = all((p) => p.publish.deny);
  return {
    publish: { allow: all((p) => p.publish.allow), ...(deny.length ? { deny } : {}) },
    subscribe: { allow: all((p) => p.subscribe.allow) },
    ...(ps.some((p) => p.allow_responses) ? { allow_responses: true } : {}),
  };
}

/**
 * `workers`: one user per worker id, `worker-<id>`, pinned to that id's subjects and `nodes`
 * record (nats-permissions.ts `workerId`). `services`: one user per tenant service,
 * `service-<name>`, allowed only the NATS API subjects of its tenant. `sharedWorker`: also the
 * shared `worker` user (any worker id).
 */
export function writeNatsAuthFiles(
  dir: string,
  clusters: readonly string[] = ["kairos"],
  workers: readonly string[] = [],
  services: readonly ServiceIdentity[] = [],
  opts: { sharedWorker?: boolean } = {},
): NatsAuthFiles {
  const credsDir = join(dir, "creds");
  mkdirSync(credsDir, { recursive: true, mode: 0o700 });
  const issuer = createAccount();
  const issuerSeed = new TextDecoder().decode(issuer.getSeed());
  const xkey = createCurve();
  const xkeySeed = new TextDecoder().decode(xkey.getSeed());
  const shared = (w: readonly Role[] | typeof NATS_ADMIN) =>
    w !== NATS_ADMIN && w.length === 1 && w[0] === "worker";
  const all: (readonly Role[] | typeof NATS_ADMIN)[] = [...roleSets(), NATS_ADMIN];
  const who = all.filter((w) => opts.sharedWorker === true || !shared(w));
  const creds: Record<string, string> = {};
  type Entry = { user: string; perms: () => SubjectPermissions; signsCallouts?: boolean };
  const roleUser = (w: readonly Role[] | typeof NATS_ADMIN): Entry => ({
    user: natsUserFor(w),
    perms: () => union(clusters.map((c) => natsPermissions(c, w))),
    signsCallouts: w !== NATS_ADMIN && w.includes("api"),
  });
  // Worker-only identities live in WORKERS (nats-accounts.ts); every other role set in KAIROS.
  const cluster: Entry[] = who.filter((w) => !shared(w)).map(roleUser);
  const workerOnly: Entry[] = [
    ...who.filter(shared).map(roleUser),
    ...workers.map((id) => {
      const user = pinnedWorkerUser(id);
      return {
        user,
        perms: () =>
          union(clusters.map((c) => natsPermissions(c, ["worker"], { workerId: id, user }))),
      };
    }),
  ];
  const svc: Entry[] = services.map(({ name, tenantId }) => {
    const user = serviceUser(name);
    return { user, perms: () => union(clusters.map((c) => servicePermissions(c, tenantId, user))) };
  });
  const write = ({ user, perms, signsCallouts }: Entry): NatsUserEntry => {
    const password = randomBytes(32).toString("base64url");
    const file = join(credsDir, `${user}.json`);
    const c: NatsCredentials = {
      user,
      password,
      inbox_prefix: inboxPrefixFor(user),
      ...(signsCallouts ? { callout_issuer_seed: issuerSeed, callout_xkey_seed: xkeySeed } : {}),
    };
    writeFileSync(file, JSON.stringify(c, null, 2) + "\n", { mode: 0o600 });
    creds[user] = file;
    return { user, password, permissions: perms() };
  };
  const clusterUsers = cluster.map(write);
  const workerUsers = workerOnly.map(write);
  const serviceUsers = svc.map(write);
  const { sysCreds, sysPassword } = writeSysCreds(credsDir);
  creds[SYS_USER] = sysCreds;
  const configFile = join(dir, "auth.conf");
  writeFileSync(
    configFile,
    renderAccounts({
      clusters,
      cluster: clusterUsers,
      workers: workerUsers,
      services: serviceUsers,
      sys: {
        user: SYS_USER,
        password: sysPassword,
        permissions: { publish: { allow: [">"] }, subscribe: { allow: [">"] } },
      },
      calloutIssuer: issuer.getPublicKey(),
      calloutXkey: xkey.getPublicKey(),
    }),
    { mode: 0o600 },
  );
  return authFilesHandle(configFile, creds, sysCreds, issuer.getPublicKey());
}

/** The `sys` user's credentials file (the system account's user), with a fresh password. */
function writeSysCreds(credsDir: string): { sysCreds: string; sysPassword: string } {
  const sysPassword = randomBytes(32).toString("base64url");
  const sysCreds = join(credsDir, `${SYS_USER}.json`);
  writeFileSync(
    sysCreds,
    JSON.stringify(
      { user: SYS_USER, password: sysPassword, inbox_prefix: "_INBOX" } satisfies NatsCredentials,
      null,
      2,
    ) + "\n",
    { mode: 0o600 },
  );
  return { sysCreds, sysPassword };
}

/** The written files, looked up by role set, worker id or service name. */
function authFilesHandle(
  configFile: string,
  creds: Record<string, string>,
  sysCreds: string,
  calloutIssuer: string,
): NatsAuthFiles {
  return {
    configFile,
    creds,
    sysCreds,
    calloutIssuer,
    credsFor: (roles) => {
      const f = creds[natsUserFor(roles)];
      if (f === undefined)
        throw new Error(
          `no user ${natsUserFor(roles)}: a worker-only node uses its pinned user (credsForWorker), or generate the shared one with sharedWorker`,
        );
      return f;
    },
    credsForWorker: (id) => {
      const f = creds[pinnedWorkerUser(id)];
      if (f === undefined)
        throw new Error(`no pinned user for worker ${id}: generate it with workers: ["${id}"]`);
      return f;
    },
    credsForService: (name) => {
      const f = creds[serviceUser(name)];
      if (f === undefined)
        throw new Error(
          `no service user ${name}: generate it with services: [{ name: "${name}", tenantId }]`,
        );
      return f;
    },
  };
}
