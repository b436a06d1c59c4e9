/**
 * Run events reach the tenant's subscriptions: one real node (process executor) on a real
 * nats-server, subscriptions made through the REST API, a webhook receiver on 127.0.0.1 and a
 * local SMTP server. Every outcome raises its event on both channels: `run.succeeded` and
 * `run.skipped` (a cron job every second whose task outlasts the second, overlap skip),
 * `run.failed` + `run.dead_lettered` (exit 7, one attempt), `run.timed_out` +
 * `run.dead_lettered` (a sleep past its 1 s timeout), `run.missed` (the node is killed while
 * the cron job falls due; its 1 s starting deadline passes before another node takes over). Each POST is signed with its
 * subscription's secret; a subscription to one job hears that job's runs only.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { signWebhook } from "../../src/notify/webhook.ts";
import { RUN_EVENT_TYPES, type RunEventType } from "../../src/protocol/events.ts";
import { apiClient, startKairosFixture, type Api, type KairosFixture } from "../support/kairos.ts";
import { startSmtp, type SmtpFixture } from "../support/smtp.ts";

interface Post {
  path: string;
  signature: string;
  deliveryId: string;
  event: string;
  body: string;
  payload: {
    id: string;
    type: RunEventType;
    run: { run_id: string; job_id: string; status: string };
  };
}

describe("run events by webhook and email", { timeout: 240_000 }, () => {
  let fx: KairosFixture;
  let api: Api;
  let server: Server;
  let smtp: SmtpFixture;
  let port = 0;
  const posts: Post[] = [];
  const waiters = new Set<() => void>();
  const nodeArgs = (): string[] => [
    "--webhook-allow-http",
    "--webhook-allow-private",
    "--smtp-url",
    smtp.url,
    "--smtp-from",
    "kairos@example.com",
    "--mail-limit",
    "1000",
  ];

  function waitPosts(pred: (p: Post[]) => boolean, ms: number, phase: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = () => {
        if (!pred(posts)) return;
        waiters.delete(check);
        clearTimeout(t);
        resolve();
      };
      const t = setTimeout(() => {
        waiters.delete(check);
        const seen = [...new Set(posts.map((p) => `${p.path} ${p.event}`))].join(", ");
        reject(new Error(`timed out after ${ms} ms waiting for ${phase}; seen: ${seen}`));
      }, ms);
      waiters.add(check);
      check();
    });
  }

  before(async () => {
    server = createServer((req, res) => {
      let body = "";
      req
        .setEncoding("utf8")
        .on("data", (c: string) => (body += c))
        .on("end", () => {
          posts.push({
            path: req.url ?? "",
            signature: String(req.headers["kairos-signature"] ?? ""),
            deliveryId: String(req.headers["kairos-delivery-id"] ?? ""),
            event: String(req.headers["kairos-event"] ?? ""),
            body,
            payload: JSON.parse(body) as Post["payload"],
          });
          res.writeHead(204).end();
          for (const w of [...waiters]) w();
        });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const addr = server.address();
    port = typeof addr === "object" && addr ? addr.port : 0;
    smtp = await startSmtp();
    fx = await startKairosFixture();
    const node = fx.spawn("ev-1", "api,scheduler,worker", nodeArgs());
    const t = await fx.newTenant("events");
    api = apiClient(await fx.apiUrl(node), t.api_key);
  });
  after(async () => {
    await fx?.stop();
    await new Promise((r) => server?.close(r));
    await smtp?.close();
  });

  it("delivers an event per outcome by webhook and by email", async () => {
    const future = new Date(Date.now() + 3600_000).toISOString();
    const once = (args: string[], timeout_s: number) => ({
      schedule: { at: future },
      task: { image: "busybox", args, timeout_s },
      retry: { max_attempts: 1 },
    });
    const failing = await api.call<{ job_id: string }>(
      "POST",
      "/v1/jobs",
      once(["/bin/sh", "-c", "echo boom; exit 7"], 10),
    );
    assert.equal(failing.status, 201);
    const all = await api.call<{ subscription_id: string; secret: string }>(
      "POST",
      "/v1/subscriptions",
      { events: [...RUN_EVENT_TYPES], webhook: { url: `http://127.0.0.1:${port}/all` } },
    );
    assert.equal(all.status, 201, JSON.stringify(all.body));
    const mail = await api.call("POST", "/v1/subscriptions", {
      events: [...RUN_EVENT_TYPES],
      email: { to: "ops@example.com" },
    });
    assert.equal(mail.status, 201, JSON.stringify(mail.body));
    assert.equal("secret" in mail.body, false, "an email subscription has no secret");
    const one = await api.call<{ secret: string }>("POST", "/v1/subscriptions", {
      events: ["run.failed", "run.succeeded"],
      job_id: failing.body.job_id,
      webhook: { url: `http://127.0.0.1:${port}/one` },
    });
    assert.equal(one.status, 201, JSON.stringify(one.body));
    const listed = await api.call<{ subscriptions: unknown[] }>("GET", "/v1/subscriptions");
    assert.equal(listed.body.subscriptions.length, 3);

    const cron = await api.call<{ job_id: string }>("POST", "/v1/jobs", {
      schedule: { cron: "* * * * * *", time_zone: "UTC" },
      task: { image: "busybox", args: ["/bin/sh", "-c", "sleep 1.5"], timeout_s: 10 },
      overlap: "skip",
      misfire: { policy: "skip", starting_deadline_s: 1 },
      retry: { max_attempts: 1 },
    });
    assert.equal(cron.status, 201, JSON.stringify(cron.body));
    const slow = await api.call<{ job_id: string }>(
      "POST",
      "/v1/jobs",
      once(["/bin/sh", "-c", "sleep 5"], 1),
    );
    assert.equal(slow.status, 201);
    await api.call("POST", `/v1/jobs/${failing.body.job_id}/runs`);
    await api.call("POST", `/v1/jobs/${slow.body.job_id}/runs`);

    const hooked = (type: RunEventType, job?: string) => (p: Post[]) =>
      p.some(
        (x) => x.path === "/all" && x.event === type && (!job || x.payload.run.job_id === job),
      );
    const mailed = (type: RunEventType) => (m: SmtpFixture["mails"]) =>
      m.some((x) => x.headers["x-kairos-event"] === type);
    const before: RunEventType[] = [
      "run.succeeded",
      "run.skipped",
      "run.failed",
      "run.timed_out",
      "run.dead_lettered",
    ];
    for (const type of before) {
      await waitPosts(hooked(type), 60_000, `a ${type} webhook`);
      await smtp.waitFor(mailed(type), 60_000, `a ${type} mail`);
    }
    await waitPosts(
      hooked("run.dead_lettered", slow.body.job_id),
      60_000,
      "the slow job's dead letter",
    );

    // The node dies (kill -9) while the cron job falls due; the next one takes its partitions
    // only once their leases have run out (seconds, past the job's 1 s starting deadline) and
    // records the occurrences it finds overdue missed.
    const dead = fx.nodes[0]!;
    dead.signal("SIGKILL");
    await dead.exited;
    const restarted = fx.spawn("ev-2", "api,scheduler,worker", nodeArgs());
    const api2 = apiClient(await fx.apiUrl(restarted), api.key);
    await waitPosts(hooked("run.missed", cron.body.job_id), 90_000, "a run.missed webhook");
    await smtp.waitFor(mailed("run.missed"), 60_000, "a run.missed mail");

    // Signatures, bodies and ids.
    for (const p of posts) {
      const secret = p.path === "/all" ? all.body.secret : one.body.secret;
      const ts = Number(/^t=(\d+),/.exec(p.signature)?.[1]);
      assert.equal(p.signature, signWebhook(secret, ts, p.body), `signature of ${p.deliveryId}`);
      assert.equal(p.payload.id, `${p.payload.run.run_id}:${p.payload.type}`);
      assert.equal(p.deliveryId, p.payload.id);
      assert.equal(p.event, p.payload.type);
    }
    const failed = posts.find((p) => p.path === "/all" && p.event === "run.failed")!;
    assert.equal(failed.payload.run.job_id, failing.body.job_id);
    assert.equal(failed.payload.run.status, "failed");
    const timedOut = posts.find((p) => p.path === "/all" && p.event === "run.timed_out")!;
    assert.equal(timedOut.payload.run.job_id, slow.body.job_id);
    // The job-scoped subscription heard its job's failure and nothing of the other jobs.
    const scoped = posts.filter((p) => p.path === "/one");
    assert.ok(
      scoped.some((p) => p.event === "run.failed"),
      "the scoped subscription's failure",
    );
    for (const p of scoped) {
      assert.equal(p.payload.run.job_id, failing.body.job_id);
      assert.ok(p.event === "run.failed" || p.event === "run.succeeded", p.event);
    }
    for (const m of smtp.mails) {
      assert.deepEqual(m.to, ["ops@example.com"]);
      assert.equal(m.from, "kairos@example.com");
      assert.match(m.headers["subject"] ?? "", /^\[kairos\] run\.[a-z_]+: job /);
      assert.ok(m.headers["x-kairos-run-id"], "names its run");
    }
    assert.equal((await api2.call("DELETE", `/v1/jobs/${cron.body.job_id}`)).status, 204);
  });
});
