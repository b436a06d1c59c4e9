/**
 * `kairos admin tenant registry <tenant_id> <registry> --username U --password-stdin | --clear`:
 * a tenant's pull credential for one registry (src/secrets/registry-credentials.ts), sealed with
 * the cluster secret key. The password only ever comes from stdin (a command line shows in `ps`);
 * nothing prints it.
 */
import type { KvStore } from "../cluster/kv.ts";
import { systemClock } from "../lib/clock.ts";
import { KairosError } from "../lib/errors.ts";
import { parseRegistry } from "../sandbox/index.ts";
import {
  MAX_PASSWORD_BYTES,
  RegistryCredentialStore,
  registryNames,
} from "../secrets/registry-credentials.ts";
import type { KvTenantDirectory } from "../tenants/directory.ts";
import { stateDir } from "./dev-file.ts";
import { processIo } from "./io.ts";
import { secretKeyFromFlag } from "./node-flags.ts";
import { existsSync } from "node:fs";
import { join } from "node:path";

export interface RegistryFlags {
  json?: boolean;
  username?: string;
  passwordStdin?: boolean;
  clear?: boolean;
  secretKeyFile?: string;
}

/**
 * The cluster secret key for sealing: --secret-key-file, KAIROS_SECRET_KEY_FILE, or the dev
 * cluster's (`.kairos/secret.key`); `invalid_argument` when none is found.
 */
function adminSecretKey(flag: string | undefined): Buffer {
  const dev = join(stateDir(), "secret.key");
  const path = flag ?? process.env["KAIROS_SECRET_KEY_FILE"] ?? (existsSync(dev) ? dev : undefined);
  const key = secretKeyFromFlag(path).secretKey;
  if (key === undefined)
    throw new KairosError(
      "invalid_argument",
      "registry credentials are sealed with the cluster secret key: pass --secret-key-file (the file the api and scheduler nodes use) or set KAIROS_SECRET_KEY_FILE",
      { field: "secret-key-file" },
    );
  return key;
}

/** The password from stdin, without its final newline. */
async function passwordFromStdin(): Promise<string> {
  const text = await processIo.readStdin(MAX_PASSWORD_BYTES + 2);
  return text.replace(/\r?\n$/, "");
}

/** Opens the cluster's tenant directory, runs `fn`, disconnects (admin.ts `withDirectory`). */
type WithDirectory = <T>(
  fn: (dir: KvTenantDirectory, tenants: KvStore) => Promise<T>,
) => Promise<T>;

/** Sets or clears the credential and prints the result. */
export async function tenantRegistry(
  tenantId: string,
  registry: string,
  f: RegistryFlags,
  withDir: WithDirectory,
): Promise<void> {
  if (f.clear && (f.username !== undefined || f.passwordStdin))
    throw new KairosError("invalid_argument", "--clear takes no --username or --password-stdin", {
      field: "clear",
    });
  if (!f.clear && (f.username === undefined || !f.passwordStdin))
    throw new KairosError(
      "invalid_argument",
      "give --username and --password-stdin (the password is never taken from the command line), or --clear",
      { field: f.username === undefined ? "username" : "password-stdin" },
    );
  const host = parseRegistry(registry);
  const key = f.clear ? undefined : adminSecretKey(f.secretKeyFile);
  const password = f.clear ? "" : await passwordFromStdin();
  const r = await withDir(async (dir, kv) => {
    if ((await dir.getTenant(tenantId)) === null)
      throw new KairosError("not_found", `tenant ${tenantId} not found`, {
        field: "tenant_id",
      });
    // Removing needs no key (nothing is opened); the store is only a writer here.
    const store = new RegistryCredentialStore(key ?? Buffer.alloc(32), () => kv, systemClock);
    const removed = f.clear
      ? await store.remove(tenantId, host)
      : (await store.set(tenantId, host, f.username!, password), undefined);
    return { removed, registries: await registryNames(kv, tenantId) };
  });
  if (f.json) {
    console.log(JSON.stringify({ tenant_id: tenantId, registry: host, registries: r.registries }));
    return;
  }
  if (f.clear)
    console.log(
      r.removed
        ? `tenant ${tenantId}: credential for ${host} removed`
        : `tenant ${tenantId}: had no credential for ${host}`,
    );
  else console.log(`tenant ${tenantId}: credential for ${host} stored (sealed)`);
  console.error(
    "Schedulers use the change within 5 s; a worker that already pulled an image for this tenant may run it without pulling again for up to 10 minutes (--pull if_missing).",
  );
}
