/**
 * `kairos admin`: tenants and API keys.
 *   tenant create <name> | get <id> | quota <id> [--max-concurrent N] [--max-jobs N]
 *                                          [--max-waiting N] [--weight W]
 *   tenant images <id> [entries...] [--clear]       the images the tenant may name (CAS)
 *   tenant egress <id> [destinations...] [--clear]  where its egress tasks may connect (CAS)
 *   tenant registry <id> <registry> --username U --password-stdin | --clear
 *                                                   the tenant's pull credential for a registry,
 *                                                   sealed with the cluster secret key
 *   key create <tenant_id> | revoke <key_id>        a revoked key works up to the API's
 *                                                   authentication cache TTL (5 s) longer
 *   operator-key create <name> | revoke <id> | list the operators' views' keys (admin-operator.ts)
 *   forecast [--hours H] [--json]                   runs due per minute, per tenant (forecast.ts)
 *   service create|revoke|get|list                  NATS API service identities (admin-service.ts)
 * A new API key is shown once. `tenant get` never shows a key hash, the webhook secret or a
 * registry credential (only the registries' names). Like
 * every command, they find the cluster from --nats, KAIROS_NATS_URL or .kairos/dev.json.
 */
import type { Command } from "commander";
import { openBuckets, type Buckets } from "../cluster/buckets.ts";
import { connectNats } from "../cluster/nats.ts";
import { readJobCount } from "../slots/job-quota.ts";
import { systemClock } from "../lib/clock.ts";
import { KairosError } from "../lib/errors.ts";
import { MAX_WAITING_RUNS_LIMIT } from "../protocol/service.ts";
import {
  KvTenantDirectory,
  publicTenant,
  validateQuota,
  type QuotaUpdate,
} from "../tenants/directory.ts";
import type { KvStore } from "../cluster/kv.ts";
import { clusterForecast, formatForecast, parseForecastFlags } from "./forecast.ts";
import { readDevFile, resolveNatsAuth, resolveNatsUrl, type NatsAuthFlags } from "./dev-file.ts";
import { registryNames } from "../secrets/registry-credentials.ts";
import { tenantRegistry, type RegistryFlags } from "./admin-registry.ts";
import { registerOperatorKeyCommands } from "./admin-operator.ts";
import { registerServiceCommands } from "./admin-service.ts";

export { ensureDevTenant } from "../tenants/dev-tenant.ts";

interface AdminFlags extends NatsAuthFlags {
  nats?: string;
  cluster?: string;
  json?: boolean;
}

/** Opens the tenant directory of the cluster the flags point at, runs `fn`, disconnects. */
async function withDirectory<T>(
  f: AdminFlags,
  fn: (dir: KvTenantDirectory, tenants: KvStore, buckets: Buckets) => Promise<T>,
): Promise<T> {
  const url = resolveNatsUrl(f.nats);
  if (!url)
    throw new KairosError(
      "invalid_argument",
      "no cluster found: pass --nats, set KAIROS_NATS_URL or start `kairos dev`",
      { field: "nats" },
    );
  const clusterName = f.cluster ?? readDevFile()?.cluster ?? "kairos";
  const nc = await connectNats({ url, name: "kairos-admin", ...resolveNatsAuth(f, url, "admin") });
  try {
    const buckets = await openBuckets(nc, { clusterName, replicas: 1 });
    return await fn(
      new KvTenantDirectory(buckets.tenants, { clock: systemClock }),
      buckets.tenants,
      buckets,
    );
  } finally {
    await nc.close();
  }
}

interface QuotaFlags {
  maxConcurrent?: string;
  maxJobs?: string;
  maxWaiting?: string;
  weight?: string;
}

const POSITIVE_INT = /^[1-9][0-9]*$/;
const POSITIVE_NUMBER = /^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$/;

/**
 * The quota flags as a `QuotaUpdate`, validated: `--max-concurrent` and `--max-jobs` positive
 * integers, `--max-waiting` a positive integer at most 100,000, `--weight` a positive number at
 * most 1000, at least one flag. Throws `invalid_argument` naming the flag.
 */
export function parseQuotaFlags(f: QuotaFlags): QuotaUpdate {
  const q: QuotaUpdate = {};
  const int = (raw: string, flag: string): number => {
    const v = Number(raw);
    if (!POSITIVE_INT.test(raw.trim()) || !Number.isSafeInteger(v))
      throw new KairosError(
        "invalid_argument",
        `${flag}: must be a positive integer, got ${JSON.stringify(raw)}`,
        { field: flag },
      );
    return v;
  };
  if (f.maxConcurrent !== undefined)
    q.max_concurrent_runs = int(f.maxConcurrent, "--max-concurrent");
  if (f.maxJobs !== undefined) q.max_jobs = int(f.maxJobs, "--max-jobs");
  if (f.maxWaiting !== undefined) {
    const n = int(f.maxWaiting, "--max-waiting");
    if (n > MAX_WAITING_RUNS_LIMIT)
      throw new KairosError(
        "invalid_argument",
        `--max-waiting: must be a positive integer at most ${MAX_WAITING_RUNS_LIMIT}, got ${JSON.stringify(f.maxWaiting)}`,
        { field: "--max-waiting" },
      );
    q.max_waiting_runs = n;
  }
  if (f.weight !== undefined) {
    const w = Number(f.weight);
    if (!POSITIVE_NUMBER.test(f.weight.trim()) || !(w > 0 && w <= 1000)) {
      throw new KairosError(
        "invalid_argument",
        `--weight: must be a positive number at most 1000, got ${JSON.stringify(f.weight)}`,
        { field: "--weight" },
      );
    }
    q.weight = w;
  }
  validateQuota(q);
  return q;
}

function common(cmd: Command): Command {
  return cmd
    .option("--nats <url>", "NATS URL (default: env KAIROS_NATS_URL or the dev cluster)")
    .option(
      "--nats-creds <file>",
      "NATS credentials file of the admin user (env KAIROS_NATS_CREDS; default: the dev cluster's)",
    )
    .option("--nats-tls-ca <file>", "CA (PEM) for a TLS NATS server (env KAIROS_NATS_TLS_CA)")
    .option("--nats-tls-cert <file>", "client certificate (PEM) (env KAIROS_NATS_TLS_CERT)")
    .option("--nats-tls-key <file>", "client key (PEM) (env KAIROS_NATS_TLS_KEY)")
    .option("--cluster <name>", "cluster name (default: the dev cluster's, else kairos)");
}

/** Registers `kairos admin …`. */
export function registerAdminCommands(program: Command): void {
  const admin = program.command("admin").description("tenants, API keys and the capacity forecast");
  const tenant = admin.command("tenant").description("tenants");
  registerTenantCreateAndGet(tenant);
  registerTenantSettings(tenant);
  registerTenantEgress(tenant);
  registerTenantRegistry(tenant);
  registerForecastCommand(admin);
  registerKeyCommands(admin);
  registerOperatorKeyCommands<AdminFlags>(admin, {
    common,
    withTenantsKv: (f, fn) => withDirectory(f, (_dir, kv) => fn(kv)),
  });
  registerServiceCommands<AdminFlags>(admin, { common, withDirectory });
}

/** `kairos admin tenant create` and `get`. */
function registerTenantCreateAndGet(tenant: Command): void {
  common(tenant.command("create <name>"))
    .description("create a tenant and its first API key")
    .option("--json", "print {tenant_id, api_key, key_id}")
    .action(async (name: string, f: AdminFlags) => {
      const r = await withDirectory(f, (dir) => dir.createTenant(name));
      if (f.json) {
        console.log(
          JSON.stringify({ tenant_id: r.tenant.tenant_id, api_key: r.apiKey, key_id: r.keyId }),
        );
        return;
      }
      console.log(`tenant   ${r.tenant.tenant_id} (${r.tenant.name})`);
      console.log(`api key  ${r.apiKey}`);
      console.log(`key id   ${r.keyId}`);
      console.error(
        "The API key is shown only once: store it now. Revoke it with `kairos admin key revoke <key id>`.",
      );
    });

  common(tenant.command("get <tenant_id>"))
    .description(
      "show a tenant: quotas, webhook URL, job count (never key hashes or the webhook secret)",
    )
    .option("--json", "print the tenant record and job_count as one JSON object")
    .action(async (tenantId: string, f: AdminFlags) => {
      const r = await withDirectory(f, async (dir, kv) => {
        const t = await dir.getTenant(tenantId);
        if (t === null)
          throw new KairosError("not_found", `tenant ${tenantId} not found`, {
            field: "tenant_id",
          });
        return {
          ...publicTenant(t),
          registries: await registryNames(kv, tenantId),
          job_count: await readJobCount(kv, tenantId),
        };
      });
      if (f.json) {
        console.log(JSON.stringify(r));
        return;
      }
      console.log(`tenant              ${r.tenant_id} (${r.name})`);
      console.log(`created             ${r.created_at}`);
      console.log(`max concurrent runs ${r.max_concurrent_runs}`);
      console.log(`max jobs            ${r.max_jobs}`);
      console.log(`max waiting runs    ${r.max_waiting_runs}`);
      console.log(`weight              ${r.weight}`);
      console.log(
        `jobs                ${r.job_count ?? "not counted yet (counted from the first create)"}`,
      );
      console.log(`webhook             ${r.webhook_url ?? "none"}`);
      console.log(
        `image policy        ${r.image_policy?.join(" ") ?? "the operator's default (kairos node --image-policy)"}`,
      );
      console.log(
        `egress policy       ${r.egress_policy?.join(" ") ?? "none (tasks may not ask for network egress)"}`,
      );
      console.log(
        `registry logins     ${r.registries.length > 0 ? r.registries.join(" ") : "none"}`,
      );
    });
}

/** `kairos admin tenant registry`: a tenant's pull credential for one registry. */
function registerTenantRegistry(tenant: Command): void {
  common(tenant.command("registry <tenant_id> <registry>"))
    .description(
      "set the tenant's credential for an image registry (host[:port] as its images name it, e.g. registry.example.com or 127.0.0.1:5000), used only to pull that tenant's images from it; the password is read from stdin and sealed with the cluster secret key; --clear removes it",
    )
    .option("--username <name>", "the registry user name")
    .option("--password-stdin", "read the password (or token) from stdin")
    .option("--clear", "remove the tenant's credential for this registry")
    .option(
      "--secret-key-file <path>",
      "the cluster secret key (as on api and scheduler nodes; env KAIROS_SECRET_KEY_FILE; default: the dev cluster's)",
    )
    .option("--json", "print {tenant_id, registry, registries}")
    .action((tenantId: string, registry: string, f: AdminFlags & RegistryFlags) =>
      tenantRegistry(tenantId, registry, f, (fn) => withDirectory(f, fn)),
    );
}

/** `kairos admin tenant images`, `quota` and `webhook`: a tenant's settings. */
function registerTenantSettings(tenant: Command): void {
  common(tenant.command("images <tenant_id> [entries...]"))
    .description(
      'set the images a tenant may name: "*", registry/namespace prefixes ending in "/", repo@sha256:<digest> or repo:tag (docs/security.md); --clear: the operator\'s default',
    )
    .option("--clear", "remove the tenant's own policy")
    .option("--json", "print the updated tenant record")
    .action(async (tenantId: string, entries: string[], f: AdminFlags & { clear?: boolean }) => {
      if (!f.clear && entries.length === 0)
        throw new KairosError("invalid_argument", "give at least one entry, or --clear", {
          field: "entries",
        });
      const t = publicTenant(
        await withDirectory(f, (dir) => dir.setImagePolicy(tenantId, f.clear ? null : entries)),
      );
      if (f.json) {
        console.log(JSON.stringify(t));
        return;
      }
      console.log(
        `tenant ${t.tenant_id}: image policy ${t.image_policy?.join(" ") ?? "the operator's default"}`,
      );
      console.error(
        "Existing jobs keep their images until patched; new creates and patches are checked (API nodes apply it within 5 s).",
      );
    });

  common(tenant.command("quota <tenant_id>"))
    .description(
      "set a tenant's quotas (positive integers, max-waiting ≤ 100000; weight a positive number ≤ 1000)",
    )
    .option("--max-concurrent <n>", "most runs of the tenant at once")
    .option(
      "--max-jobs <n>",
      "most jobs (a create over it answers 422 quota_exceeded; existing jobs stay)",
    )
    .option(
      "--max-waiting <n>",
      "most runs waiting for a slot (default 1000); a scheduled run asking beyond it is recorded throttled",
    )
    .option("--weight <w>", "share of the fleet relative to other tenants")
    .option("--json", "print the updated tenant record")
    .action(async (tenantId: string, f: AdminFlags & QuotaFlags) => {
      const q = parseQuotaFlags(f);
      const t = publicTenant(await withDirectory(f, (dir) => dir.setQuota(tenantId, q)));
      if (f.json) {
        console.log(JSON.stringify(t));
        return;
      }
      console.log(
        `tenant ${t.tenant_id}: max_concurrent_runs ${t.max_concurrent_runs}, max_jobs ${t.max_jobs}, max_waiting_runs ${t.max_waiting_runs}, weight ${t.weight}`,
      );
    });

  common(tenant.command("webhook <tenant_id> [url]"))
    .description(
      "set the dead-letter webhook (omit url, or pass --clear, to remove it); prints the signing secret",
    )
    .option("--clear", "remove the webhook")
    .option("--json", "print {tenant_id, webhook_url, webhook_secret}")
    .action(
      async (tenantId: string, url: string | undefined, f: AdminFlags & { clear?: boolean }) => {
        const target = f.clear || url === undefined ? null : url;
        const r = await withDirectory(f, (dir) => dir.setWebhook(tenantId, target));
        if (f.json) {
          console.log(
            JSON.stringify({ tenant_id: tenantId, webhook_url: target, webhook_secret: r.secret }),
          );
          return;
        }
        if (target === null) console.log(`webhook of ${tenantId} removed`);
        else {
          console.log(`webhook  ${target}`);
          console.log(`secret   ${r.secret}`);
          console.error(
            "Verify Kairos-Signature: t=<unix s>,v1=hex(HMAC-SHA256(secret, `${t}.${body}`)). The secret is shown only once.",
          );
        }
      },
    );
}

/** `kairos admin tenant egress`: where the tenant's egress tasks may connect. */
function registerTenantEgress(tenant: Command): void {
  common(tenant.command("egress <tenant_id> [destinations...]"))
    .description(
      'set where the tenant\'s tasks with network "egress" may connect: host[:port] or *.domain[:port] (no port: 80 and 443; docs/security.md); --clear: no egress',
    )
    .option("--clear", "remove the tenant's egress policy (its tasks may not ask for egress)")
    .option("--json", "print the updated tenant record")
    .action(
      async (tenantId: string, destinations: string[], f: AdminFlags & { clear?: boolean }) => {
        if (f.clear === true && destinations.length > 0)
          throw new KairosError("invalid_argument", "give destinations or --clear, not both", {
            field: "destinations",
          });
        if (!f.clear && destinations.length === 0)
          throw new KairosError("invalid_argument", "give at least one destination, or --clear", {
            field: "destinations",
          });
        const t = publicTenant(
          await withDirectory(f, (dir) =>
            dir.setEgressPolicy(tenantId, f.clear ? null : destinations),
          ),
        );
        if (f.json) {
          console.log(JSON.stringify(t));
          return;
        }
        console.log(`tenant ${t.tenant_id}: egress policy ${t.egress_policy?.join(" ") ?? "none"}`);
        console.error(
          "Creates and patches are checked within 5 s; offers of every egress job carry the new policy within 10 s.",
        );
      },
    );
}

/** `kairos admin forecast`. */
function registerForecastCommand(admin: Command): void {
  common(admin.command("forecast"))
    .description(
      "runs due per minute over the next hours, across the cluster, per tenant (from the jobs' schedules)",
    )
    .option("--hours <h>", "hours ahead, 1-168", "1")
    .option("--max-jobs <n>", "most jobs read (past it the forecast is marked truncated)")
    .option("--json", "print the forecast as one JSON object (docs/cli.md)")
    .action(async (f: AdminFlags & { hours?: string; maxJobs?: string }) => {
      const o = parseForecastFlags(f);
      const r = await withDirectory(f, (_dir, _tenants, buckets) =>
        clusterForecast(buckets, systemClock.now(), o),
      );
      console.log(f.json ? JSON.stringify(r) : formatForecast(r));
    });
}

/** `kairos admin key create` and `revoke`. */
function registerKeyCommands(admin: Command): void {
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
