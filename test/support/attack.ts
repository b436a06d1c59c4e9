/**
 * Helpers of the attack tests (test/integration/security/attack-*.test.ts): each attack is made
 * with a role's real credentials on a real nats-server, then the test waits for whichever comes
 * first — the defence's own signal (a node event, a permission violation reported to the
 * attacker's connection) or the attack's effect on the cluster's state — and asserts it was the
 * defence. So the same test fails (with the effect it saw) when the defence is removed, instead of
 * merely timing out. The set-up every attack shares is here too: the victim tenant's record (or
 * two tenants' on a new nats-server), and the nodes, each started with its own identity's
 * credentials.
 */
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { PermissionViolationError, headers } from "@nats-io/nats-core";
import { NatsApiClient } from "../../src/client/nats-api-client.ts";
import type { NodeEvent } from "../../src/cluster/events.ts";
import type { EventBus } from "../../src/cluster/events.ts";
import { openBuckets } from "../../src/cluster/buckets.ts";
import { encode } from "../../src/cluster/codec.ts";
import { connectNats } from "../../src/cluster/nats.ts";
import { makeNodeConfig, type Role } from "../../src/cluster/config.ts";
import { metricsText, type BusRefusalReason, type BusResponder } from "../../src/metrics/index.ts";
import type { Tenant } from "../../src/protocol/service.ts";
import { startKairos, type KairosProcess, type ProcessOptions } from "../../src/server/start.ts";
import { TENANT_DEFAULTS } from "../../src/tenants/directory.ts";
import { eventually } from "./kairos.ts";
import { startNats, type NatsFixture } from "./nats.ts";

/**
 * Writes the victim tenant `tenantId` (named `name`, default limits) into the `kairos` cluster's
 * tenants bucket with `admin`, opening the buckets first as every node does (one replica).
 */
export async function putVictimTenant(
  admin: NatsConnection,
  tenantId: string,
  name = "alpha",
): Promise<void> {
  const b = await openBuckets(admin, { clusterName: "kairos", replicas: 1 });
  const t: Tenant = {
    tenant_id: tenantId,
    name,
    created_at: "2026-01-01T00:00:00Z",
    ...TENANT_DEFAULTS,
  };
  const w = await b.tenants.create(`t.${tenantId}`, encode(t));
  if (!w.ok) throw new Error(`tenant ${tenantId} exists`);
}

/**
 * Starts an in-process Kairos node of the `kairos` cluster on `nats` with its own identity's
 * credentials (`nats.credsForNode`: a worker-only node its pinned `worker-<id>` user, any other
 * node its role set's user), so the attack meets the permissions production runs with. The noop
 * executor, one worker slot, the HTTP API on a free loopback port and no drain on stop, unless
 * `opts` says otherwise.
 */
export function startAttackNode(
  nats: NatsFixture,
  node: { nodeId: string; roles: Role[]; partitions: number },
  opts: Partial<ProcessOptions> = {},
): Promise<KairosProcess> {
  return startKairos(
    makeNodeConfig({
      natsUrl: nats.url,
      natsAuth: { credsFile: nats.credsForNode(node.nodeId, node.roles) },
      nodeId: node.nodeId,
      roles: node.roles,
      partitions: node.partitions,
    }),
    {
      executor: "noop",
      workerSlots: 1,
      apiHost: "127.0.0.1",
      apiPort: 0,
      drainTimeoutMs: 0,
      ...opts,
    },
  );
}

/** Resolves once `node` holds all its partitions, within 20 s: its actors are there to attack. */
export async function allPartitionsHeld(node: KairosProcess): Promise<void> {
  await eventually(
    async () => (node.node.heldPartitions().length === node.node.partitions ? true : undefined),
    20_000,
    "all partitions held",
  );
}

/** Resolves with the first node event matching `pred` (armed at the call: call before acting). */
export function nextEvent<E extends NodeEvent>(
  events: EventBus,
  pred: (e: NodeEvent) => e is E,
): Promise<E>;
export function nextEvent(events: EventBus, pred: (e: NodeEvent) => boolean): Promise<NodeEvent>;
export function nextEvent(events: EventBus, pred: (e: NodeEvent) => boolean): Promise<NodeEvent> {
  return new Promise((resolve) => {
    const off = events.on((e) => {
      if (!pred(e)) return;
      off();
      resolve(e);
    });
  });
}

/** The next `reply_refused` of `responder` on this node's events (armed at the call). */
export function nextReplyRefusal(
  events: EventBus,
  responder: Extract<NodeEvent, { type: "reply_refused" }>["responder"],
): Promise<Extract<NodeEvent, { type: "reply_refused" }>> {
  return nextEvent(
    events,
    (e): e is Extract<NodeEvent, { type: "reply_refused" }> =>
      e.type === "reply_refused" && e.responder === responder,
  );
}

/** Resolves with the next permission violation the server reports to `nc` (armed at the call). */
export function nextPermissionError(nc: NatsConnection): Promise<PermissionViolationError> {
  return (async () => {
    for await (const s of nc.status()) {
      if (s.type === "error" && s.error instanceof PermissionViolationError) return s.error;
    }
    throw new Error("connection closed before a permission violation was reported");
  })();
}

export type Outcome<T> = { kind: "defended"; value: T } | { kind: "effect"; what: string };

/**
 * Waits for the defence's signal or the attack's effect, whichever comes first. `effect` re-reads
 * the cluster's state (a KV get, a stream's message count) and returns a description of what
 * changed, or undefined while nothing did; it is read every 50 ms. Throws after `timeoutMs` when
 * neither came (the test then names `phase`).
 */
export async function defenceOrEffect<T>(
  defence: Promise<T>,
  effect: () => Promise<string | undefined>,
  phase: string,
  timeoutMs = 10_000,
): Promise<Outcome<T>> {
  let settled: Outcome<T> | undefined;
  void defence.then(
    (value) => {
      settled ??= { kind: "defended", value };
    },
    () => undefined,
  );
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (settled) return settled;
    const what = await effect();
    if (what !== undefined) return { kind: "effect", what };
    if (settled) return settled;
    if (Date.now() > deadline)
      throw new Error(
        `${phase}: neither the defence's signal nor the attack's effect within ${timeoutMs} ms`,
      );
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** `defenceOrEffect`, asserting the defence won: returns its value, or throws naming the effect. */
export async function defended<T>(
  defence: Promise<T>,
  effect: () => Promise<string | undefined>,
  phase: string,
  timeoutMs?: number,
): Promise<T> {
  const o = await defenceOrEffect(defence, effect, phase, timeoutMs);
  if (o.kind === "effect") throw new Error(`${phase}: the attack succeeded: ${o.what}`);
  // The defence spoke first; the effect must not follow (e.g. a refusal logged, then a write anyway).
  const late = await effect();
  if (late !== undefined)
    throw new Error(`${phase}: refused, yet the attack had its effect: ${late}`);
  return o.value;
}

/** `kairos_bus_refusals_total{responder, reason}` of this process (its nodes run in-process). */
export async function busRefusals(
  responder: BusResponder,
  reason: BusRefusalReason,
): Promise<number> {
  const series = `kairos_bus_refusals_total{responder="${responder}",reason="${reason}"} `;
  const line = (await metricsText()).body.split("\n").find((l) => l.startsWith(series));
  return line === undefined ? 0 : Number(line.slice(series.length));
}

/**
 * `refused` resolves when `kairos_bus_refusals_total{responder, reason}` grows past its value at
 * the call (await the call before acting: it reads the baseline). The counter has no event, so it is
 * re-read every 25 ms, for at most 20 s.
 */
export async function armBusRefusal(
  responder: BusResponder,
  reason: BusRefusalReason,
): Promise<{ refused: Promise<number> }> {
  const base = await busRefusals(responder, reason);
  const deadline = Date.now() + 20_000;
  const refused = (async () => {
    for (;;) {
      const n = await busRefusals(responder, reason);
      if (n > base) return n - base;
      if (Date.now() > deadline)
        throw new Error(
          `kairos_bus_refusals_total{responder="${responder}",reason="${reason}"} did not grow in 20 s`,
        );
      await new Promise((r) => setTimeout(r, 25));
    }
  })();
  return { refused };
}

/** An identity that attacks, connected with its real credentials. */
export interface Attacker {
  who: string;
  connect: () => Promise<NatsConnection>;
}

/**
 * The identities outside the cluster account: tenant services' users (`service-<name>`, as
 * `who`) and both worker identities (the shared `worker` and the pinned `worker-w1`), connected
 * under names starting with `tag`. `nats` is read when an attacker connects (the fixture is made
 * in `before`).
 */
export function outsiders(
  nats: () => NatsFixture,
  services: readonly { who: string; name: string }[],
  tag: string,
): Attacker[] {
  return [
    ...services.map((s) => ({ who: s.who, connect: () => nats().connectService(s.name) })),
    { who: "shared worker", connect: () => nats().connect(`${tag}-worker`, ["worker"]) },
    {
      who: "pinned worker w1",
      connect: () =>
        connectNats({
          url: nats().url,
          name: `${tag}-w1`,
          credsFile: nats().auth.credsForWorker("w1"),
        }),
    },
  ];
}

/**
 * A nats-server (authorization on) with two tenants, each with its NATS API service user: A
 * (`tenantA`, `connectService("alpha")`) and B (`tenantB`, `connectService("beta")`), both
 * tenants' records written (`putVictimTenant`, named after their user) by `admin`, an admin
 * connection named `adminName`. The caller closes `admin` and stops `nats`; should the set-up
 * fail, both are ended here, as the caller has neither yet.
 */
export async function startTwoTenants(
  tenantA: string,
  tenantB: string,
  adminName: string,
): Promise<{ nats: NatsFixture; admin: NatsConnection }> {
  const nats = await startNats({
    services: [
      { name: "alpha", tenantId: tenantA },
      { name: "beta", tenantId: tenantB },
    ],
  });
  let admin: NatsConnection | undefined;
  try {
    admin = await nats.connect(adminName);
    await putVictimTenant(admin, tenantA, "alpha");
    await putVictimTenant(admin, tenantB, "beta");
    return { nats, admin };
  } catch (e) {
    await admin?.close();
    await nats.stop();
    throw e;
  }
}

/**
 * Runs `fn` with a NATS API client of tenant `tenantId` over a connection as its service user
 * `service-<service>` (the victim acting on its own tenant), closed after `fn` settles.
 */
export async function asTenant<T>(
  nats: NatsFixture,
  service: string,
  tenantId: string,
  fn: (client: NatsApiClient) => Promise<T>,
): Promise<T> {
  const nc = await nats.connectService(service);
  try {
    return await fn(new NatsApiClient(nc, { cluster: "kairos", tenantId }));
  } finally {
    await nc.close();
  }
}

/** A write of a KV key made by publishing, as an attacker can: each must be refused. */
export type KvWriteAttack = "put" | "delete" | "purge" | "stream purge";
export const KV_WRITE_ATTACKS: readonly KvWriteAttack[] = [
  "put",
  "delete",
  "purge",
  "stream purge",
];

/**
 * Makes one write attack on `key` of the `kairos` cluster's bucket `bucket` (`value` for a put):
 * a put, a `DEL` marker, a `PURGE` marker, or a purge of the key's subject from the bucket's
 * stream. Returns the subject the server must refuse. The KV library's purge adds `Nats-Rollup:
 * sub`, which the buckets refuse from anyone (rollups off: attack-rollup.test.ts); the marker
 * alone is what could land. A stream purge is a request: the JetStream API acts only on one with
 * a reply subject to answer.
 */
export function attackKvWrite(
  nc: NatsConnection,
  bucket: string,
  op: KvWriteAttack,
  key: string,
  value: Uint8Array,
): string {
  const subject = `$KV.kairos_${bucket}.${key}`;
  const h = headers();
  switch (op) {
    case "put":
      nc.publish(subject, value);
      return subject;
    case "delete":
      h.set("KV-Operation", "DEL");
      nc.publish(subject, undefined, { headers: h });
      return subject;
    case "purge":
      h.set("KV-Operation", "PURGE");
      nc.publish(subject, undefined, { headers: h });
      return subject;
    case "stream purge": {
      const api = `$JS.API.STREAM.PURGE.KV_kairos_${bucket}`;
      void nc
        .request(api, new TextEncoder().encode(JSON.stringify({ filter: subject })), {
          timeout: 2_000,
        })
        .catch(() => undefined);
      return api;
    }
  }
}

/**
 * Makes every write attack (`KV_WRITE_ATTACKS`) on every key of `keys` of the `kairos` cluster's
 * bucket `bucket` with `nc`, each awaited to the server's refusal (of a publish of that very
 * subject) or its effect: `state` read again unlike before the attempt (`label` names it). A
 * refused attempt must not have its effect afterwards either. Returns what got through.
 */
export async function attackKvWrites(
  nc: NatsConnection,
  o: {
    who: string;
    bucket: string;
    keys: readonly string[];
    value: Uint8Array;
    state: () => Promise<string>;
    label: string;
  },
): Promise<string[]> {
  const through: string[] = [];
  for (const op of KV_WRITE_ATTACKS) {
    for (const key of o.keys) {
      const was = await o.state();
      const changed = async () => {
        const now = await o.state();
        return now !== was ? `${o.label} went from ${was} to ${now}` : undefined;
      };
      const v = nextPermissionError(nc);
      const subject = attackKvWrite(nc, o.bucket, op, key, o.value);
      await nc.flush().catch(() => undefined);
      const r = await defenceOrEffect(v, changed, `${o.who} ${op} ${key}`);
      const late = r.kind === "defended" ? await changed() : undefined;
      if (r.kind === "effect") through.push(`${op} ${key}: ${r.what}`);
      else if (late !== undefined) through.push(`${op} ${key}: refused, yet ${late}`);
      else
        assert.deepEqual(
          [r.value.operation, r.value.subject],
          ["publish", subject],
          `${o.who} ${op} ${key}`,
        );
    }
  }
  return through;
}
