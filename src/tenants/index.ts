/** Tenants and API keys: the KV-backed directory and the dev tenant helper. */
export {
  KvTenantDirectory,
  MAX_WEIGHT,
  TENANT_DEFAULTS,
  newId,
  publicTenant,
  validateQuota,
  type QuotaUpdate,
  type KeyRecord,
  type TenantRecord,
  type TenantDirectoryOptions,
} from "./directory.ts";
export { ensureDevTenant, DEV_TENANT_NAME } from "./dev-tenant.ts";
export { LruCache } from "./lru.ts";
