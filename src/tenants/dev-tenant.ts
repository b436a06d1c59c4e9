/**
 * The dev tenant of `kairos dev`: a tenant named "dev" and a key for it. The plain key is not
 * stored in KV (only its hash), so `kairos dev` keeps it in .kairos/dev.json and passes it back
 * here on the next start: it is reused while it still authenticates for "dev", else a new key
 * is made (for the existing tenant, or a new tenant on first start).
 */
import type { TenantDirectory } from "../protocol/service.ts";
import { isKairosError } from "../lib/errors.ts";

/** The dev tenant's name. */
export const DEV_TENANT_NAME = "dev";

/** Returns the dev tenant's id and a working API key, creating what is missing. */
export async function ensureDevTenant(
  dir: TenantDirectory,
  existingKey?: string,
): Promise<{ tenant_id: string; api_key: string }> {
  if (existingKey !== undefined) {
    const t = await dir.authenticate(existingKey);
    if (t !== null && t.name === DEV_TENANT_NAME)
      return { tenant_id: t.tenant_id, api_key: existingKey };
  }
  const found = await dir.findTenantByName(DEV_TENANT_NAME);
  if (found !== null)
    return { tenant_id: found.tenant_id, api_key: (await dir.createKey(found.tenant_id)).apiKey };
  try {
    const created = await dir.createTenant(DEV_TENANT_NAME);
    return { tenant_id: created.tenant.tenant_id, api_key: created.apiKey };
  } catch (e) {
    if (!isKairosError(e, "conflict")) throw e;
    // Another process created it between our lookup and our create.
    const again = await dir.findTenantByName(DEV_TENANT_NAME);
    if (again === null) throw e;
    return { tenant_id: again.tenant_id, api_key: (await dir.createKey(again.tenant_id)).apiKey };
  }
}
