/**
 * Subjects of the internal NATS API (pure; shared by the service and the client):
 * `kairos.<cluster>.api.<tenant_id>.<resource>.<verb>[.<id>]`, e.g. `jobs.create`,
 * `jobs.get.<job_id>`, `jobs.patch.<job_id>`, `jobs.delete.<job_id>`, `jobs.run.<job_id>`,
 * `runs.list.<job_id>`, `runs.get.<run_id>`, `runs.cancel.<run_id>`, `runs.dead_lettered`, `runs.tenant`,
 * `subscriptions.create`, `subscriptions.list`, `subscriptions.get.<id>`, `subscriptions.delete.<id>`; each
 * maps to one REST route
 * (the table is in docs/nats-api.md).
 *
 * The tenant is a subject token so that NATS permissions can pin it: a service user may publish
 * only on `kairos.<cluster>.api.<its tenant>.>` (nats-permissions.ts), and the server takes the
 * tenant from that token, never from the body. Pitfall: ids are path-like tokens as in REST; a
 * malformed one is `not_found`.
 */

/** Every operation, and what its last subject token names (none: no id token). */
export const API_OPERATIONS = {
  "jobs.create": "none",
  "jobs.list": "none",
  "jobs.get": "job",
  "jobs.patch": "job",
  "jobs.delete": "job",
  "jobs.run": "job",
  "runs.list": "job",
  "runs.get": "run",
  "runs.cancel": "run",
  "runs.dead_lettered": "none",
  "runs.tenant": "none",
  "subscriptions.create": "none",
  "subscriptions.list": "none",
  "subscriptions.get": "subscription",
  "subscriptions.delete": "subscription",
} as const;

export type ApiOperation = keyof typeof API_OPERATIONS;

/** The queue group every API node's responder joins: each request reaches one node. */
export const API_QUEUE_GROUP = "kairos-api";

/** Header names (the same names and formats as the REST headers). */
export const API_HEADERS = { idempotencyKey: "Idempotency-Key", ifMatch: "If-Match" } as const;

/** `kairos.<cluster>.api` */
export function apiPrefix(cluster: string): string {
  return `kairos.${cluster}.api`;
}

/** What an API node subscribes to (every tenant, every operation). */
export function apiWildcard(cluster: string): string {
  return `${apiPrefix(cluster)}.*.>`;
}

/** What a service user of `tenantId` may publish to. */
export function tenantApiWildcard(cluster: string, tenantId: string): string {
  return `${apiPrefix(cluster)}.${tenantId}.>`;
}

/** The subject of one request. `id` is required exactly when the operation names one. */
export function apiSubject(
  cluster: string,
  tenantId: string,
  op: ApiOperation,
  id?: string,
): string {
  return id === undefined
    ? `${apiPrefix(cluster)}.${tenantId}.${op}`
    : `${apiPrefix(cluster)}.${tenantId}.${op}.${id}`;
}

/** A parsed request subject. `op` undefined: no such operation (answered `not_found`). */
export interface ParsedApiSubject {
  tenantToken: string;
  op: ApiOperation | undefined;
  /** The id token (job, run or subscription id), when the operation takes one. */
  id: string | undefined;
  /** The operation as sent, for error messages (bounded). */
  raw: string;
}

function isOperation(s: string): s is ApiOperation {
  return Object.prototype.hasOwnProperty.call(API_OPERATIONS, s);
}

/**
 * Parses `kairos.<cluster>.api.<tenant>.<resource>.<verb>[.<id>]`; null when the subject is not
 * under this cluster's API prefix at all.
 */
export function parseApiSubject(cluster: string, subject: string): ParsedApiSubject | null {
  const prefix = `${apiPrefix(cluster)}.`;
  if (!subject.startsWith(prefix)) return null;
  const tokens = subject.slice(prefix.length).split(".");
  const [tenantToken, resource, verb, id, ...extra] = tokens;
  if (tenantToken === undefined || tenantToken === "") return null;
  const name = `${resource ?? ""}.${verb ?? ""}`;
  const raw = tokens.slice(1).join(".").slice(0, 200);
  if (!isOperation(name) || extra.length > 0)
    return { tenantToken, op: undefined, id: undefined, raw };
  const takesId = API_OPERATIONS[name] !== "none";
  if (takesId !== (id !== undefined)) return { tenantToken, op: undefined, id: undefined, raw };
  return { tenantToken, op: name, id, raw };
}
