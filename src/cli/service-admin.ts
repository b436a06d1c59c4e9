/**
 * What `kairos admin service create|revoke|get` do (registered in admin.ts): tenant service
 * identities for the NATS API, issued and revoked at run time — no nats-server reload, no other
 * credential changed (src/tenants/services.ts for the records, src/nats-api/auth-callout.ts for
 * the admission).
 *
 *   kairos admin service create <name> --tenant <id> [--creds-out <file>] [--json]
 *        → user `service-<name>` and its secret, shown once (or written to a 0600 credentials file)
 *   kairos admin service revoke <name> [--nats-sys-creds <file>]
 *        → the record is marked revoked, then every live connection of the identity is closed on
 *          every server (system account: CONNZ + KICK), twice: again after nats-server's auth
 *          timeout, for a connection whose callout read the record just before the revocation
 *   kairos admin service get <name> [--json] → the record without its hash
 */
import type { NatsConnection } from "@nats-io/transport-node";
import { connectNats, type NatsCredentials } from "../cluster/nats.ts";
import { inboxPrefixFor, serviceUser } from "../cluster/nats-permissions.ts";
import { AUTH_TIMEOUT_S, SERVICES_ACCOUNT, SYS_USER } from "../cluster/nats-accounts.ts";
import { kickUser } from "../cluster/nats-kick.ts";
import { systemClock } from "../lib/clock.ts";
import { KairosError } from "../lib/errors.ts";
import { KvServiceDirectory, type ServiceRecord } from "../tenants/services.ts";
import type { KvTenantDirectory } from "../tenants/directory.ts";
import type { KvStore } from "../cluster/kv.ts";
import { readDevFile, resolveNatsAuth, resolveNatsUrl } from "./dev-file.ts";

/** Issues a service identity; `tenants` checks that the tenant exists. */
export async function createService(
  kv: KvStore,
  tenants: Pick<KvTenantDirectory, "getTenant">,
  name: string,
  tenantId: string,
): Promise<{ record: ServiceRecord; creds: NatsCredentials }> {
  const dir = new KvServiceDirectory(kv, systemClock);
  const { record, secret } = await dir.create(
    name,
    tenantId,
    async (id) => (await tenants.getTenant(id)) !== null,
  );
  const user = serviceUser(name);
  return { record, creds: { user, password: secret, inbox_prefix: inboxPrefixFor(user) } };
}

/**
 * Revokes a service identity and closes its connections: the record first (so a reconnect is
 * refused), then kicks, then — after the auth timeout, by when any callout that read the record
 * before the revocation has finished — kicks again. `sys` is a system-account connection.
 */
export async function revokeService(
  kv: KvStore,
  sys: NatsConnection,
  name: string,
  opts: { graceMs?: number } = {},
): Promise<{ record: ServiceRecord; kicked: number; servers: number }> {
  const record = await new KvServiceDirectory(kv, systemClock).revoke(name);
  const first = await kickUser(sys, SERVICES_ACCOUNT, serviceUser(name));
  await new Promise((r) => setTimeout(r, opts.graceMs ?? AUTH_TIMEOUT_S * 1000 + 500));
  const second = await kickUser(sys, SERVICES_ACCOUNT, serviceUser(name));
  return {
    record,
    kicked: first.kicked + second.kicked,
    servers: Math.max(first.servers, second.servers),
  };
}

interface SysFlags {
  nats?: string;
  natsSysCreds?: string;
  natsTlsCa?: string;
  natsTlsCert?: string;
  natsTlsKey?: string;
}

/** A connection as the system account's user: flag, env `KAIROS_NATS_SYS_CREDS`, else the dev cluster's. */
export async function connectSys(f: SysFlags): Promise<NatsConnection> {
  const url = resolveNatsUrl(f.nats);
  if (!url)
    throw new KairosError(
      "invalid_argument",
      "no cluster found: pass --nats, set KAIROS_NATS_URL or start `kairos dev`",
      { field: "nats" },
    );
  const dev = readDevFile();
  const creds =
    f.natsSysCreds ??
    process.env["KAIROS_NATS_SYS_CREDS"] ??
    (dev?.nats_url === url ? dev.nats_creds?.[SYS_USER] : undefined);
  if (creds === undefined || creds.trim() === "") {
    throw new KairosError(
      "invalid_argument",
      "revoking closes live connections through the NATS system account: pass --nats-sys-creds <file> (`kairos nats-auth` writes creds/sys.json) or set KAIROS_NATS_SYS_CREDS",
      { field: "nats-sys-creds" },
    );
  }
  const { tls } = resolveNatsAuth(
    {
      ...(f.natsTlsCa ? { natsTlsCa: f.natsTlsCa } : {}),
      ...(f.natsTlsCert ? { natsTlsCert: f.natsTlsCert } : {}),
      ...(f.natsTlsKey ? { natsTlsKey: f.natsTlsKey } : {}),
    },
    url,
    SYS_USER,
  );
  return connectNats({ url, name: "kairos-admin-sys", credsFile: creds, ...(tls ? { tls } : {}) });
}

/** The record as shown (never the hash). */
export function shownService(r: ServiceRecord): Omit<ServiceRecord, "hash"> & { user: string } {
  const { hash: _hash, ...rest } = r;
  return { user: serviceUser(r.name), ...rest };
}
