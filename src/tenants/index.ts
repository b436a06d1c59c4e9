/** Tenants and API keys: the KV-backed directory and the dev tenant helper. */
export { KvTenantDirectory, TENANT_DEFAULTS, newId, type KeyRecord, type TenantRecord, type TenantDirectoryOptions } from "./directory.ts";
export { ensureDevTenant, DEV_TENANT_NAME } from "./dev-tenant.ts";
export { LruCache } from "./lru.ts";
