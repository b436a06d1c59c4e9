/**
 * End-to-end fixture: a real nats-server and real `kairos node` processes (process executor),
 * a tenant with an API key created through the real tenant directory, and a small HTTP client;
 * `tenantAccess` reaches such a tenant both ways, REST and the internal NATS API.
 */
import type { NatsConnection } from "@nats-io/transport-node";
import { NatsApiClient } from "../../src/client/nats-api-client.ts";
import type { ServiceIdentity } from "../../src/dev/nats-auth-files.ts";
import { systemClock } from "../../src/lib/clock.ts";
import { openBuckets } from "../../src/cluster/buckets.ts";
import { KvTenantDirectory } from "../../src/tenants/index.ts";
import { TENANT_DEFAULTS } from "../../src/tenants/directory.ts";
import { encode } from "../../src/cluster/codec.ts";
import type { Tenant } from "../../src/protocol/service.ts";
import { startNats, type NatsFixture, type NatsFixtureOptions } from "./nats.ts";
import { spawnNode, type NodeProc } from "./nodes.ts";

export interface Api {
  readonly url: string;
  readonly key: string;
  call<T = Record<string, unknown>>(
    method: string,
    path: string,
    body?: unknown,
    headers?: Record<string, string>,
  ): Promise<{ status: number; body: T; headers: Headers }>;
}

export function apiClient(url: string, key: string): Api {
  return {
    url,
    key,
    async call(method, path, body, headers = {}) {
      const res = await fetch(`${url}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${key}`,
          ...(body !== undefined ? { "content-type": "application/json" } : {}),
          ...headers,
        },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
      const text = await res.text();
      return {
        status: res.status,
        body: (text ? JSON.parse(text) : null) as never,
        headers: res.headers,
      };
    },
  };
}

export interface KairosFixture {
  readonly nats: NatsFixture;
  readonly nodes: NodeProc[];
  readonly nc: NatsConnection;
  readonly tenants: KvTenantDirectory;
  spawn(nodeId: string, roles: string, extra?: string[]): NodeProc;
  /** Waits for a node's API to listen and returns its URL. */
  apiUrl(node: NodeProc): Promise<string>;
  /** The `/metrics` URL of a node spawned with `--metrics-port` (its `metrics_listening` event). */
  metricsUrl(node: NodeProc): Promise<string>;
  newTenant(name: string): Promise<{ tenant_id: string; api_key: string }>;
  /**
   * A tenant with a chosen id (service users' permissions name the tenant, so their ids are
   * fixed before the server starts) and an API key; written as the directory writes it.
   */
  putTenant(tenantId: string, name: string): Promise<{ tenant_id: string; api_key: string }>;
  stop(): Promise<void>;
}

export async function startKairosFixture(
  opts: { partitions?: number; nats?: NatsFixtureOptions } = {},
): Promise<KairosFixture> {
  const nats = await startNats(opts.nats);
  const nc = await nats.connect("e2e");
  const nodes: NodeProc[] = [];
  const b = await openBuckets(nc, { clusterName: "kairos", replicas: 1 });
  const tenants = new KvTenantDirectory(b.tenants, { clock: systemClock, authCacheTtlMs: 0 });
  const fx: KairosFixture = {
    nats,
    nodes,
    nc,
    tenants,
    spawn(nodeId, roles, extra = []) {
      const n = spawnNode({
        natsUrl: nats.url,
        creds: nats.credsForNode(nodeId, roles),
        nodeId,
        roles,
        partitions: opts.partitions ?? 8,
        extraArgs: ["--executor", "process", ...extra],
      });
      nodes.push(n);
      return n;
    },
    async apiUrl(node) {
      const e = (await node.waitFor(
        (ev) => (ev as { type: string }).type === "api_listening",
        30_000,
        "api listening",
      )) as unknown as { api_url: string };
      return e.api_url;
    },
    async metricsUrl(node) {
      const e = (await node.waitFor(
        (ev) => (ev as { type: string }).type === "metrics_listening",
        30_000,
        "metrics listening",
      )) as unknown as { metrics_url: string };
      return e.metrics_url;
    },
    async newTenant(name) {
      const t = await fx.tenants.createTenant(name);
      return { tenant_id: t.tenant.tenant_id, api_key: t.apiKey };
    },
    async putTenant(tenantId, name) {
      const t: Tenant = {
        tenant_id: tenantId,
        name,
        created_at: new Date().toISOString().replace(/\.\d+Z$/, "Z"),
        ...TENANT_DEFAULTS,
      };
      const w = await b.tenants.create(`t.${tenantId}`, encode(t));
      if (!w.ok) throw new Error(`tenant ${tenantId} exists`);
      const k = await fx.tenants.createKey(tenantId);
      return { tenant_id: tenantId, api_key: k.apiKey };
    },
    async stop() {
      await Promise.all(nodes.map((n) => n.stop()));
      await nc.close();
      // Every node ran with its role's NATS user: a violation is a permission the role lacks.
      // (Service users' violations are the tests' own attempts: test/e2e/nats-api.test.ts.)
      const v = nats.violations().filter((l) => !l.includes('User "service-'));
      if (v.length > 0)
        console.error(
          `nats-server reported ${v.length} permission violation(s) by Kairos nodes:\n${v.slice(0, 20).join("\n")}`,
        );
      await nats.stop();
    },
  };
  return fx;
}

/** A tenant reachable both ways: REST with its API key, the internal NATS API as its service. */
export interface TenantAccess {
  readonly tenant_id: string;
  /** REST on the API node, with the tenant's API key. */
  readonly rest: Api;
  /** The connection as the service user `service-<name>` (the caller closes it). */
  readonly nc: NatsConnection;
  /** The internal NATS API over `nc`, on the tenant's own subjects. */
  readonly nats: NatsApiClient;
}

/**
 * Writes the tenant of `service` (named as the service) with an API key, and connects as its
 * service user. The fixture must have been started with that service in `nats.services`: a service
 * user's permissions name its tenant, so the id is fixed before the server starts.
 */
export async function tenantAccess(
  fx: KairosFixture,
  apiUrl: string,
  service: ServiceIdentity,
): Promise<TenantAccess> {
  const t = await fx.putTenant(service.tenantId, service.name);
  const nc = await fx.nats.connectService(service.name);
  return {
    tenant_id: t.tenant_id,
    rest: apiClient(apiUrl, t.api_key),
    nc,
    nats: new NatsApiClient(nc, { cluster: "kairos", tenantId: t.tenant_id }),
  };
}

/** Polls `fn` until it returns a value (not undefined); the poll only re-reads state over HTTP. */
export async function eventually<T>(
  fn: () => Promise<T | undefined>,
  timeoutMs: number,
  phase: string,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${phase}${last instanceof Error ? `: ${last.message}` : ""}`,
      );
    await new Promise((r) => setTimeout(r, 100));
  }
}
