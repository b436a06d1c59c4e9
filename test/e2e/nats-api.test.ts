/**
 * The internal NATS API end to end (docs/nats-api.md): one real `kairos node` with every role
 * (process executor) on a real nats-server with authorization on, driven by tenants' internal
 * services through `NatsApiClient` with their own service credentials (`service-<name>`, pinned
 * to one tenant) — the REST tests of test/e2e/jobs.test.ts, mirrored — plus malformed and oversize
 * payloads (an error reply; the node keeps serving), a forged `tenant_id`, and tenant A's
 * credentials against tenant B's subjects (refused by the server; B's jobs untouched).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { NatsApiClient, ApiError } from "../../src/client/nats-api-client.ts";
import { apiSubject } from "../../src/nats-api/subjects.ts";
import type { ApiReply } from "../../src/nats-api/wire.ts";
import {
  eventually,
  startKairosFixture,
  tenantAccess,
  type Api,
  type KairosFixture,
} from "../support/kairos.ts";
import { rejectsWith } from "../support/errors.ts";

// Service users name their tenant in their permissions, so the ids are fixed before the server starts.
const TA = "tnatsapiaaaaaaaaa";
const TB = "tnatsapibbbbbbbbb";
const ALPHA = { name: "alpha", tenantId: TA };
const BETA = { name: "beta", tenantId: TB };

const sh = (script: string, timeout_s = 10) => ({
  image: "busybox",
  args: ["/bin/sh", "-c", script],
  timeout_s,
});
const later = () => ({ at: new Date(Date.now() + 3600_000).toISOString() });
const enc = new TextEncoder();
const dec = new TextDecoder();

/** A raw request as a service (for payloads the typed client would never send). */
async function raw(
  nc: NatsConnection,
  subject: string,
  data: Uint8Array | string,
): Promise<ApiReply> {
  const m = await nc.request(subject, typeof data === "string" ? enc.encode(data) : data, {
    timeout: 10_000,
  });
  return JSON.parse(dec.decode(m.data)) as ApiReply;
}

function expectErr(r: ApiReply, status: number, code: string, field?: string): void {
  assert.equal(r.ok, false, JSON.stringify(r));
  const e = r;
  assert.equal(e.status, status, JSON.stringify(r));
  assert.equal(e.error.code, code, JSON.stringify(r));
  if (field !== undefined) assert.equal(e.error.field, field, JSON.stringify(r));
}

describe(
  "internal NATS API end to end (single node, process executor)",
  { timeout: 300_000 },
  () => {
    let fx: KairosFixture;
    let ncA: NatsConnection;
    let ncB: NatsConnection;
    let apiA: NatsApiClient;
    let apiB: NatsApiClient;
    let restA: Api;

    before(async () => {
      fx = await startKairosFixture({ nats: { services: [ALPHA, BETA] } });
      const node = fx.spawn("natsapi-1", "api,scheduler,worker", ["--slots", "4"]);
      const url = await fx.apiUrl(node);
      await node.waitFor(
        (e) => (e as { type: string }).type === "nats_api_listening",
        30_000,
        "nats api listening",
      );
      ({ rest: restA, nc: ncA, nats: apiA } = await tenantAccess(fx, url, ALPHA));
      ({ nc: ncB, nats: apiB } = await tenantAccess(fx, url, BETA));
    });
    after(async () => {
      await ncA?.close();
      await ncB?.close();
      await fx?.stop();
    });

    it("a job every 2 s produces one run per occurrence with exit 0; runs listed and read over NATS", async () => {
      const { job, created } = await apiA.createJob({
        name: "tick",
        schedule: { cron: "*/2 * * * * *", time_zone: "UTC" },
        task: sh('echo "tick $KAIROS_RUN_ID"'),
        overlap: "allow",
      });
      assert.equal(created, true);
      assert.equal(job.tenant_id, TA);
      const done = await eventually(
        async () => {
          const rs = (await apiA.listRuns(job.job_id, { limit: 200, status: "succeeded" })).runs;
          return rs.length >= 2 ? rs : undefined;
        },
        30_000,
        "2 succeeded runs",
      );
      const paused = await apiA.patchJob(job.job_id, { enabled: false });
      assert.equal(paused.next_run_at, null);
      for (const r of done) {
        const one = await apiA.getRun(r.run_id);
        assert.equal(one.result?.exit_code, 0);
        assert.equal(one.result?.output, `tick ${r.run_id}\n`);
      }
      await apiA.deleteJob(job.job_id);
    });

    it("run now, stale If-Match, Idempotency-Key replay, delete — and REST sees the same jobs", async () => {
      const body = {
        schedule: { cron: "0 0 1 1 *", time_zone: "Asia/Kolkata" },
        task: sh("echo once"),
      };
      const a = await apiA.createJob(body, { idempotencyKey: "create-1" });
      const b = await apiA.createJob(body, { idempotencyKey: "create-1" });
      assert.equal(a.created, true);
      assert.equal(b.created, false);
      assert.equal(b.job.job_id, a.job.job_id);
      await rejectsWith(
        apiA.createJob({ ...body, name: "other" }, { idempotencyKey: "create-1" }),
        "conflict",
      );
      const id = a.job.job_id;
      const viaRest = await restA.call<{ job_id: string; version: number }>(
        "GET",
        `/v1/jobs/${id}`,
      );
      assert.equal(viaRest.status, 200);
      assert.equal(viaRest.headers.get("etag"), `"1"`);
      const p1 = await apiA.patchJob(id, { name: "renamed" }, { ifMatch: 1 });
      assert.equal(p1.version, 2);
      await assert.rejects(
        apiA.patchJob(id, { name: "again" }, { ifMatch: '"1"' }),
        (e: unknown) =>
          e instanceof ApiError && e.code === "precondition_failed" && e.status === 412,
      );
      assert.equal(
        (await restA.call<{ name: string }>("GET", `/v1/jobs/${id}`)).body.name,
        "renamed",
      );
      const now = await apiA.runNow(id);
      assert.equal(now.trigger, "manual");
      await eventually(
        async () => ((await apiA.getRun(now.run_id)).status === "succeeded" ? true : undefined),
        20_000,
        "manual run succeeded",
      );
      const listed = await apiA.listJobs({ limit: 200 });
      assert.ok(listed.jobs.some((j) => j.job_id === id));
      await apiA.deleteJob(id);
      await rejectsWith(apiA.getJob(id), "not_found");
      assert.equal((await restA.call("GET", `/v1/jobs/${id}`)).status, 404);
    });

    it("malformed and oversize payloads get an error reply, and the node keeps serving", async () => {
      const create = apiSubject("kairos", TA, "jobs.create");
      expectErr(await raw(ncA, create, "{not json"), 400, "invalid_argument", "body");
      expectErr(
        await raw(ncA, create, new Uint8Array([0xff, 0xfe, 0x00, 0x01])),
        400,
        "invalid_argument",
        "body",
      );
      expectErr(await raw(ncA, create, ""), 400, "invalid_argument", "body");
      expectErr(
        await raw(
          ncA,
          create,
          JSON.stringify({ schedule: { cron: "61 * * * *" }, task: sh("true") }),
        ),
        400,
        "invalid_argument",
        "schedule.cron",
      );
      expectErr(
        await raw(
          ncA,
          create,
          JSON.stringify({ schedule: later(), task: sh("true"), name: "x".repeat(100 * 1024) }),
        ),
        413,
        "payload_too_large",
        "body",
      );
      expectErr(
        await raw(ncA, apiSubject("kairos", TA, "jobs.list"), '{"limit": "lots"}'),
        400,
        "invalid_argument",
        "limit",
      );
      expectErr(await raw(ncA, `kairos.kairos.api.${TA}.jobs.explode`, "{}"), 404, "not_found");
      ncA.publish(create, enc.encode("junk without a reply subject"));
      const before = (await apiA.listJobs({ limit: 200 })).jobs.length;
      const { job } = await apiA.createJob({ schedule: later(), task: sh("true") });
      assert.equal(
        (await apiA.listJobs({ limit: 200 })).jobs.length,
        before + 1,
        "served after the junk; the junk created nothing",
      );
      await apiA.deleteJob(job.job_id);
    });

    it("a forged tenant_id is rejected and nothing is created, for another tenant's id or its own", async () => {
      for (const t of [TB, TA]) {
        await rejectsWith(
          apiA.createJob({ schedule: later(), task: sh("true"), tenant_id: t }),
          "invalid_argument",
          "tenant_id",
        );
      }
      assert.deepEqual((await apiB.listJobs()).jobs, [], "nothing appeared at B");
      const { job } = await apiA.createJob({ schedule: later(), task: sh("true") });
      await rejectsWith(
        apiA.patchJob(job.job_id, { enabled: false, tenant_id: TB }),
        "invalid_argument",
        "tenant_id",
      );
      assert.equal((await apiA.getJob(job.job_id)).version, 1);
      await apiA.deleteJob(job.job_id);
    });

    it("tenant A's service credentials cannot reach tenant B's jobs", async () => {
      const { job } = await apiB.createJob({ name: "b-only", schedule: later(), task: sh("true") });
      const run = await apiB.runNow(job.job_id);
      // 1. B's subjects: the server refuses A's publish (a permission violation), nothing reaches B.
      const asB = new NatsApiClient(ncA, { cluster: "kairos", tenantId: TB, timeoutMs: 5000 });
      await rejectsWith(asB.deleteJob(job.job_id), "permission_denied");
      await rejectsWith(asB.patchJob(job.job_id, { enabled: false }), "permission_denied");
      await rejectsWith(asB.getJob(job.job_id), "permission_denied");
      await rejectsWith(asB.listJobs(), "permission_denied");
      // 2. A's own subjects with B's ids: not_found, exactly like ids that do not exist.
      await rejectsWith(apiA.getJob(job.job_id), "not_found");
      await rejectsWith(apiA.patchJob(job.job_id, { enabled: false }), "not_found");
      await rejectsWith(apiA.deleteJob(job.job_id), "not_found");
      await rejectsWith(apiA.runNow(job.job_id), "not_found");
      await rejectsWith(apiA.listRuns(job.job_id), "not_found");
      await rejectsWith(apiA.getRun(run.run_id), "not_found");
      assert.ok(!(await apiA.listJobs({ limit: 200 })).jobs.some((j) => j.job_id === job.job_id));
      // 3. Nor can A listen to the API subjects (other tenants' requests).
      const sub = ncA.subscribe("kairos.kairos.api.>");
      await ncA.flush().catch(() => undefined);
      await eventually(
        async () =>
          fx.nats.violations().some((v) => /service-alpha/.test(v) && /Subscription/i.test(v))
            ? true
            : undefined,
        10_000,
        "subscription violation logged",
      );
      sub.unsubscribe();
      // B's job is untouched.
      const still = await apiB.getJob(job.job_id);
      assert.equal(still.version, 1);
      assert.equal(still.enabled, true);
      const v = fx.nats.violations();
      assert.ok(
        v.some(
          (l) =>
            /service-alpha/.test(l) &&
            l.includes(`kairos.kairos.api.${TB}.jobs.delete.${job.job_id}`),
        ),
        v.join("\n"),
      );
      assert.deepEqual(
        v.filter((l) => !/service-alpha/.test(l)),
        [],
        "the node and service-beta caused no violation",
      );
      await apiB.deleteJob(job.job_id);
    });
  },
);
