/**
 * Writes a secured NATS set-up to a folder: `auth.conf` (the nats-server `authorization` block:
 * one user per Kairos role set and `admin`, each with the permissions of nats-permissions.ts) and
 * one credentials file per user under `creds/<user>.json` (mode 0600). Used by `kairos dev`, the
 * test harness and `kairos nats-auth` (operators).
 *
 * Users: `api`, `scheduler`, `worker`, every combination a node may run (`api_scheduler`, …,
 * `api_scheduler_worker`: a node's identity is the union of its roles), and `admin`; on request
 * pinned workers (`worker-<id>`) and tenant services (`service-<name>`, the NATS API). Passwords are
 * 256 random bits; the server config holds them in clear (keep it 0600; nats-server also accepts
 * bcrypt hashes, `nats server passwd`, for configs that other people can read).
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Role } from "../cluster/config.ts";
import type { NatsCredentials } from "../cluster/nats.ts";
import {
  NATS_ADMIN, inboxPrefixFor, natsPermissions, natsUserFor, pinnedWorkerUser, renderAuthorization, roleSets,
  serviceUser, servicePermissions, type NatsUserEntry, type SubjectPermissions,
} from "../cluster/nats-permissions.ts";

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
  /** The credentials file for a node with these roles, or for `admin`. */
  credsFor(roles: readonly Role[] | typeof NATS_ADMIN): string;
  /** The credentials file of a worker user pinned to `workerId` (generated with `workers`). */
  credsForWorker(workerId: string): string;
  /** The credentials file of a tenant's service user (generated with `services`). */
  credsForService(name: string): string;
}

/** Merges the permissions of several clusters (a test server may host more than one). */
function union(ps: SubjectPermissions[]): SubjectPermissions {
  const all = (f: (p: SubjectPermissions) => string[] | undefined) => [...new Set(ps.flatMap((p) => f(p) ?? []))];
  const deny = all((p) => p.publish.deny);
  return {
    publish: { allow: all((p) => p.publish.allow), ...(deny.length ? { deny } : {}) },
    subscribe: { allow: all((p) => p.subscribe.allow) },
    ...(ps.some((p) => p.allow_responses) ? { allow_responses: true } : {}),
  };
}

/**
 * `workers`: also one user per worker id, `worker-<id>`, pinned to that id's start/cancel
 * subjects and `nodes` record (nats-permissions.ts `workerId`). `services`: also one user per
 * tenant service, `service-<name>`, allowed only the NATS API subjects of its tenant.
 */
export function writeNatsAuthFiles(dir: string, clusters: readonly string[] = ["kairos"], workers: readonly string[] = [], services: readonly ServiceIdentity[] = []): NatsAuthFiles {
  const credsDir = join(dir, "creds");
  mkdirSync(credsDir, { recursive: true, mode: 0o700 });
  const who: (readonly Role[] | typeof NATS_ADMIN)[] = [...roleSets(), NATS_ADMIN];
  const users: NatsUserEntry[] = [];
  const creds: Record<string, string> = {};
  const entries: { user: string; perms: () => SubjectPermissions }[] = [
    ...who.map((w) => ({ user: natsUserFor(w), perms: () => union(clusters.map((c) => natsPermissions(c, w))) })),
    ...workers.map((id) => {
      const user = pinnedWorkerUser(id);
      return { user, perms: () => union(clusters.map((c) => natsPermissions(c, ["worker"], { workerId: id, user }))) };
    }),
    ...services.map(({ name, tenantId }) => {
      const user = serviceUser(name);
      return { user, perms: () => union(clusters.map((c) => servicePermissions(c, tenantId, user))) };
    }),
  ];
  for (const { user, perms } of entries) {
    const password = randomBytes(32).toString("base64url");
    users.push({ user, password, permissions: perms() });
    const file = join(credsDir, `${user}.json`);
    writeFileSync(file, JSON.stringify({ user, password, inbox_prefix: inboxPrefixFor(user) } satisfies NatsCredentials, null, 2) + "\n", { mode: 0o600 });
    creds[user] = file;
  }
  const configFile = join(dir, "auth.conf");
  writeFileSync(configFile, renderAuthorization(users), { mode: 0o600 });
  return {
    configFile,
    creds,
    credsFor: (roles) => creds[natsUserFor(roles)]!,
    credsForWorker: (id) => {
      const f = creds[pinnedWorkerUser(id)];
      if (f === undefined) throw new Error(`no pinned user for worker ${id}: generate it with workers: ["${id}"]`);
      return f;
    },
    credsForService: (name) => {
      const f = creds[serviceUser(name)];
      if (f === undefined) throw new Error(`no service user ${name}: generate it with services: [{ name: "${name}", tenantId }]`);
      return f;
    },
  };
}
