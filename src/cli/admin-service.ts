/**
 * `kairos admin service create|revoke|list|get`: tenant service identities for the NATS API
 * (service-admin.ts does the work). Registered by admin.ts, which lends its NATS flags and its
 * connection to the tenant directory.
 */
import type { Command } from "commander";
import { writeFileSync } from "node:fs";
import type { KvStore } from "../cluster/kv.ts";
import { serviceUser } from "../cluster/nats-permissions.ts";
import { systemClock } from "../lib/clock.ts";
import { KairosError } from "../lib/errors.ts";
import type { KvTenantDirectory } from "../tenants/directory.ts";
import { KvServiceDirectory } from "../tenants/services.ts";
import { connectSys, createService, revokeService, shownService } from "./service-admin.ts";
import type { NatsAuthFlags } from "./dev-file.ts";

/** The flags every admin command has. */
export interface AdminFlagsBase extends NatsAuthFlags {
  nats?: string;
  cluster?: string;
  json?: boolean;
}

/** What admin.ts lends: its common flags, and a run of `fn` over the cluster's tenant directory. */
export interface ServiceAdminHelpers<F extends AdminFlagsBase> {
  common: (cmd: Command) => Command;
  withDirectory: <T>(f: F, fn: (dir: KvTenantDirectory, kv: KvStore) => Promise<T>) => Promise<T>;
}

/** `kairos admin service …`: tenant service identities. */
export function registerServiceCommands<F extends AdminFlagsBase>(
  admin: Command,
  h: ServiceAdminHelpers<F>,
): void {
  const service = admin
    .command("service")
    .description(
      "tenant service identities for the NATS API (effective at once, no server reload)",
    );
  registerServiceCreateAndRevoke(service, h);
  registerServiceListAndGet(service, h);
}

/** `kairos admin service create` and `revoke`. */
function registerServiceCreateAndRevoke<F extends AdminFlagsBase>(
  service: Command,
  h: ServiceAdminHelpers<F>,
): void {
  h.common(service.command("create <name>"))
    .description(
      "issue the NATS identity service-<name>, allowed only the tenant's NATS API; prints its secret once",
    )
    .requiredOption("--tenant <tenant_id>", "the tenant whose API it may use")
    .option(
      "--creds-out <file>",
      "write its credentials file ({user, password, inbox_prefix}, mode 0600, must not exist) instead of printing the secret",
    )
    .option("--json", "print {user, password, inbox_prefix, tenant_id}")
    .action(async (name: string, f: F & { tenant: string; credsOut?: string }) => {
      const r = await h.withDirectory(f, (dir, kv) => createService(kv, dir, name, f.tenant));
      if (f.credsOut !== undefined) {
        writeFileSync(f.credsOut, JSON.stringify(r.creds, null, 2) + "\n", {
          mode: 0o600,
          flag: "wx",
        });
        console.log(
          `service ${r.creds.user} of tenant ${r.record.tenant_id}: credentials written to ${f.credsOut}`,
        );
        return;
      }
      if (f.json) {
        console.log(JSON.stringify({ ...r.creds, tenant_id: r.record.tenant_id }));
        return;
      }
      console.log(`user      ${r.creds.user}`);
      console.log(`secret    ${r.creds.password}`);
      console.log(`tenant    ${r.record.tenant_id}`);
      console.error(
        `The secret is shown only once; it works at once as the NATS user/password. Revoke with \`kairos admin service revoke ${name}\`.`,
      );
    });
  h.common(service.command("revoke <name>"))
    .description(
      "revoke a service identity and close its live connections at once (needs the NATS system account's credentials)",
    )
    .option(
      "--nats-sys-creds <file>",
      "credentials file of the NATS system account's user sys (env KAIROS_NATS_SYS_CREDS; default: the dev cluster's)",
    )
    .action(async (name: string, f: F & { natsSysCreds?: string }) => {
      const sys = await connectSys(f);
      try {
        const r = await h.withDirectory(f, (_dir, kv) => revokeService(kv, sys, name));
        console.log(
          `revoked ${serviceUser(name)} (tenant ${r.record.tenant_id}); ${r.kicked} live connection(s) closed on ${r.servers} server(s)`,
        );
      } finally {
        await sys.close();
      }
    });
}

/** `kairos admin service list` and `get`: never secrets or hashes. */
function registerServiceListAndGet<F extends AdminFlagsBase>(
  service: Command,
  h: ServiceAdminHelpers<F>,
): void {
  h.common(service.command("list"))
    .description("list service identities (never secrets or hashes)")
    .option("--tenant <tenant_id>", "only this tenant's")
    .option("--json", "print {services: [...], truncated}")
    .action(async (f: F & { tenant?: string }) => {
      const r = await h.withDirectory(f, (_dir, kv) =>
        new KvServiceDirectory(kv, systemClock).list(f.tenant),
      );
      const services = r.services.map(shownService);
      if (f.json) {
        console.log(JSON.stringify({ services, truncated: r.truncated }));
        return;
      }
      for (const v of services)
        console.log(
          `${v.user.padEnd(30)} ${v.tenant_id}  ${v.revoked ? `revoked ${v.revoked_at ?? ""}` : "live"}  created ${v.created_at}`,
        );
      if (r.truncated) console.error("(truncated: more identities than one listing reads)");
    });
  h.common(service.command("get <name>"))
    .description("show a service identity (never its secret or hash)")
    .option("--json", "print the record as JSON")
    .action(async (name: string, f: F) => {
      const r = await h.withDirectory(f, (_dir, kv) =>
        new KvServiceDirectory(kv, systemClock).get(name),
      );
      if (r === null)
        throw new KairosError("not_found", `service ${name} not found`, { field: "name" });
      const v = shownService(r);
      console.log(
        f.json
          ? JSON.stringify(v)
          : Object.entries(v)
              .map(([k, x]) => `${k.padEnd(10)} ${String(x)}`)
              .join("\n"),
      );
    });
}
