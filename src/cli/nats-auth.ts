/**
 * `kairos nats-auth <dir>`: generates a secured NATS set-up for an operator — `<dir>/auth.conf`
 * (the `accounts`, `system_account` and `authorization` blocks of src/cluster/nats-accounts.ts,
 * auth callout included, to `include` in the server config) and `<dir>/creds/<user>.json` (0600)
 * — with the generator `kairos dev` and the tests use (src/dev/nats-auth-files.ts). Distribute
 * each role's file to its nodes (`--nats-creds`); keep admin's and sys's for `kairos admin`.
 * Workers get one user each (`--workers <ids>`); the shared `worker` user only with
 * `--shared-worker`.
 *
 * Pitfalls: every run writes new passwords and a new callout issuer key for every user. Tenant
 * services are best issued at run time (`kairos admin service create`); `--service
 * <name>:<tenant_id>` writes a static one, changed only by running this again and reloading.
 */
import type { Command } from "commander";
import { KairosError } from "../lib/errors.ts";
import { writeNatsAuthFiles, type ServiceIdentity } from "../dev/nats-auth-files.ts";

const NAME_RE = /^[A-Za-z0-9_-]{1,64}$/;
/** A service name leaves room for the `service-` prefix within NATS user names of 64 characters. */
const SERVICE_RE = /^[A-Za-z0-9_-]{1,48}$/;
/** A tenant id is one subject token of the service's permission: no dots, no wildcards. */
const TENANT_RE = /^[A-Za-z0-9_-]{1,64}$/;
/** Most service users per run (each is one entry in the server's authorization block). */
export const MAX_SERVICES = 1000;

/** `--service name:tenant_id` (repeatable, or comma-separated) → the service identities, validated. */
export function parseServiceFlags(values: readonly string[]): ServiceIdentity[] {
  const items = values
    .flatMap((v) => v.split(","))
    .map((s) => s.trim())
    .filter(Boolean);
  if (items.length > MAX_SERVICES)
    throw new KairosError("invalid_argument", `--service: at most ${MAX_SERVICES} services`, {
      field: "service",
    });
  const out: ServiceIdentity[] = [];
  const seen = new Set<string>();
  for (const item of items) {
    const [name = "", tenantId = "", ...rest] = item.split(":");
    if (!SERVICE_RE.test(name) || !TENANT_RE.test(tenantId) || rest.length > 0) {
      throw new KairosError(
        "invalid_argument",
        `--service: "${item.slice(0, 120)}" must be <name>:<tenant_id> (name 1-48 of [A-Za-z0-9_-], the tenant id as \`kairos admin tenant create\` printed it)`,
        { field: "service" },
      );
    }
    if (seen.has(name))
      throw new KairosError("invalid_argument", `--service: "${name}" given twice`, {
        field: "service",
      });
    seen.add(name);
    out.push({ name, tenantId });
  }
  return out;
}

export function registerNatsAuthCommand(program: Command): void {
  program
    .command("nats-auth <dir>")
    .description(
      "write a NATS authorization block (users per role, least-privilege permissions) and their credentials files",
    )
    .option(
      "--cluster <names>",
      "Kairos cluster name(s) the users serve, comma-separated",
      "kairos",
    )
    .option(
      "--workers <ids>",
      "one user per worker id (worker-<id>), pinned to that worker's own subjects and nodes record; comma-separated node ids of the worker nodes",
    )
    .option(
      "--shared-worker",
      "also the shared worker user, which may speak for and receive the offers of any worker id (weaker: docs/security.md)",
    )
    .option(
      "--service <name:tenant_id...>",
      "also a static user per tenant service (service-<name>, SERVICES account) that may use only the NATS API of that tenant; prefer `kairos admin service create` (no reload); repeatable or comma-separated",
    )
    .action(
      (
        dir: string,
        f: { cluster: string; workers?: string; service?: string[]; sharedWorker?: boolean },
      ) => {
        const clusters = f.cluster
          .split(",")
          .map((s) => s.trim())
          .filter(Boolean);
        const bad = clusters.find((c) => !NAME_RE.test(c));
        if (clusters.length === 0 || bad !== undefined) {
          throw new KairosError(
            "invalid_argument",
            `--cluster: "${bad ?? ""}" must be 1-64 of [A-Za-z0-9_-]`,
            { field: "cluster" },
          );
        }
        const workers = (f.workers ?? "")
          .split(",")
          .map((s) => s.trim())
          .filter(Boolean);
        const badWorker = workers.find((w) => !NAME_RE.test(w));
        if (badWorker !== undefined)
          throw new KairosError(
            "invalid_argument",
            `--workers: "${badWorker}" must be 1-64 of [A-Za-z0-9_-]`,
            { field: "workers" },
          );
        if (workers.length === 0 && f.sharedWorker !== true)
          console.error(
            "note: no worker users written: worker-only nodes need --workers <their node ids> (or --shared-worker)",
          );
        const files = writeNatsAuthFiles(
          dir,
          clusters,
          workers,
          parseServiceFlags(f.service ?? []),
          { sharedWorker: f.sharedWorker === true },
        );
        console.log(
          `wrote ${files.configFile} (include it in nats-server's config) and ${Object.keys(files.creds).length} credentials files:`,
        );
        for (const [user, file] of Object.entries(files.creds))
          console.log(`  ${user.padEnd(22)} ${file}`);
        console.log(
          "Accounts: KAIROS (api and scheduler role sets, admin; JetStream), WORKERS (worker-only users; only the worker protocol crosses), SERVICES (tenant services; imports only the NATS API), SYS (sys).",
        );
        console.log(
          "Tenant services: `kairos admin service create <name> --tenant <id>` (API nodes admit them through the auth callout).",
        );
      },
    );
}
