/**
 * `kairos admin`: tenants and API keys.
 *
 *   kairos admin tenant create <name> [--json]   → tenant id and a new API key (shown once)
 *   kairos admin key create <tenant_id> [--json] → a new API key for the tenant
 *   kairos admin key revoke <key_id>             → the key stops working (within the API's
 *                                                  authentication cache TTL, 5 s by default)
 *
 * They find the cluster from --nats, KAIROS_NATS_URL or .kairos/dev.json, like every command.
 */
import type { Command } from "commander";
import { openBuckets } from "../cluster/buckets.ts";
import { connectNats } from "../cluster/nats.ts";
import type { TenantDirectory } from "../jobs/service.ts";
import { systemClock } from "../lib/clock.ts";
import { KairosError } from "../lib/errors.ts";
import { KvTenantDirectory } from "../tenants/directory.ts";
import { readDevFile, resolveNatsUrl } from "./dev-file.ts";

export { ensureDevTenant } from "../tenants/dev-tenant.ts";

interface AdminFlags {
  nats?: string;
  cluster?: string;
  json?: boolean;
}

/** Opens the tenant directory of the cluster the flags point at, runs `fn`, disconnects. */
async function withDirectory<T>(f: AdminFlags, fn: (dir: TenantDirectory) => Promise<T>): Promise<T> {
  const url = resolveNatsUrl(f.nats);
  if (!url) throw new KairosError("invalid_argument", "no cluster found: pass --nats, set KAIROS_NATS_URL or start `kairos dev`", { field: "nats" });
  const clusterName = f.cluster ?? readDevFile()?.cluster ?? "kairos";
  const nc = await connectNats({ url, name: "kairos-admin" });
  try {
    const buckets = await openBuckets(nc, { clusterName, replicas: 1 });
    return await fn(new KvTenantDirectory(buckets.tenants, { clock: systemClock }));
  } finally {
    await nc.close();
  }
}

function common(cmd: Command): Command {
  return cmd
    .option("--nats <url>", "NATS URL (default: env KAIROS_NATS_URL or the dev cluster)")
    .option("--cluster <name>", "cluster name (default: the dev cluster's, else kairos)");
}

/** Registers `kairos admin …`. */
export function registerAdminCommands(program: Command): void {
  const admin = program.command("admin").description("tenants and API keys");
  const tenant = admin.command("tenant").description("tenants");
  common(tenant.command("create <name>"))
    .description("create a tenant and its first API key")
    .option("--json", "print {tenant_id, api_key, key_id}")
    .action(async (name: string, f: AdminFlags) => {
      const r = await withDirectory(f, (dir) => dir.createTenant(name));
      if (f.json) {
        console.log(JSON.stringify({ tenant_id: r.tenant.tenant_id, api_key: r.apiKey, key_id: r.keyId }));
        return;
      }
      console.log(`tenant   ${r.tenant.tenant_id} (${r.tenant.name})`);
      console.log(`api key  ${r.apiKey}`);
      console.log(`key id   ${r.keyId}`);
      console.error("The API key is shown only once: store it now. Revoke it with `kairos admin key revoke <key id>`.");
    });

  common(tenant.command("webhook <tenant_id> [url]"))
    .description("set the dead-letter webhook (omit url, or pass --clear, to remove it); prints the signing secret")
    .option("--clear", "remove the webhook")
    .option("--json", "print {tenant_id, webhook_url, webhook_secret}")
    .action(async (tenantId: string, url: string | undefined, f: AdminFlags & { clear?: boolean }) => {
      const target = f.clear || url === undefined ? null : url;
      const r = await withDirectory(f, (dir) => dir.setWebhook(tenantId, target));
      if (f.json) {
        console.log(JSON.stringify({ tenant_id: tenantId, webhook_url: target, webhook_secret: r.secret }));
        return;
      }
      if (target === null) console.log(`webhook of ${tenantId} removed`);
      else {
        console.log(`webhook  ${target}`);
        console.log(`secret   ${r.secret}`);
        console.error("Verify Kairos-Signature: t=<unix s>,v1=hex(HMAC-SHA256(secret, `${t}.${body}`)). The secret is shown only once.");
      }
    });

  const key = admin.command("key").description("API keys");
  common(key.command("create <tenant_id>"))
    .description("create another API key for a tenant (e.g. to rotate keys)")
    .option("--json", "print {tenant_id, api_key, key_id}")
    .action(async (tenantId: string, f: AdminFlags) => {
      const r = await withDirectory(f, (dir) => dir.createKey(tenantId));
      if (f.json) {
        console.log(JSON.stringify({ tenant_id: tenantId, api_key: r.apiKey, key_id: r.keyId }));
        return;
      }
      console.log(`api key  ${r.apiKey}`);
      console.log(`key id   ${r.keyId}`);
      console.error("The API key is shown only once: store it now.");
    });
  common(key.command("revoke <key_id>"))
    .description("revoke an API key (API nodes stop accepting it within their 5 s auth cache)")
    .action(async (keyId: string, f: AdminFlags) => {
      await withDirectory(f, (dir) => dir.revokeKey(keyId));
      console.log(`revoked ${keyId}`);
    });
}
