/**
 * A failure storm sends a bounded number of mails: 10,000 `run.failed` events of one tenant
 * within one minute go through the real path — a subscription in the tenants bucket, the event
 * outbox on a real nats-server (an entry written, delivered, deleted per event), the Mailer over
 * nodemailer to a local SMTP server — and the tenant's address receives `maxPerWindow` (10) event
 * mails plus ONE digest counting the other 9,990, when the minute's window closes.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { systemClock } from "../../src/lib/clock.ts";
import { openBuckets, type Buckets } from "../../src/cluster/buckets.ts";
import { DeadLetterOutbox } from "../../src/notify/dead-letters.ts";
import { Mailer, mailConfig } from "../../src/notify/mail.ts";
import { RunEvents } from "../../src/notify/run-events.ts";
import { KvSubscriptions, SubscriptionLookup } from "../../src/notify/subscriptions.ts";
import type { RunView } from "../../src/protocol/model.ts";
import { startNats, type NatsFixture } from "../support/nats.ts";
import { startSmtp, type SmtpFixture } from "../support/smtp.ts";

const TENANT = "tstormstormstorms";
const STORM = 10_000;
const LIMIT = 10;

function failedRun(i: number): RunView {
  const id = `r${String(i).padStart(6, "0")}`;
  return {
    run_id: id,
    job_id: `j${i % 500}`,
    tenant_id: TENANT,
    scheduled_for: "2026-01-01T00:00:00Z",
    trigger: "schedule",
    status: "failed",
    attempt: 1,
    attempts: [],
    created_at: "2026-01-01T00:00:00Z",
    started_at: "2026-01-01T00:00:00Z",
    finished_at: "2026-01-01T00:00:01Z",
    next_attempt_at: null,
    result: { exit_code: 1, output: "boom" },
    reason: "dead-lettered after 1 attempt(s): exit code 1",
  };
}

describe("a failure storm by email", { timeout: 300_000 }, () => {
  let nats: NatsFixture;
  let nc: NatsConnection;
  let buckets: Buckets;
  let smtp: SmtpFixture;
  let outbox: DeadLetterOutbox | undefined;
  let mailer: Mailer | undefined;
  let lookup: SubscriptionLookup | undefined;

  before(async () => {
    nats = await startNats();
    nc = await nats.connect("storm");
    buckets = await openBuckets(nc, { clusterName: "kairos", replicas: 1 });
    smtp = await startSmtp();
  });
  after(async () => {
    outbox?.stop();
    lookup?.stop();
    mailer?.stop();
    await smtp?.close();
    await nc?.close();
    await nats?.stop();
  });

  it(`sends ${LIMIT} mails and one digest for ${STORM} failures in one minute`, async () => {
    await new KvSubscriptions(buckets.tenants, systemClock).create(TENANT, {
      events: ["run.failed"],
      job_id: null,
      channel: { kind: "email", to: "ops@example.com" },
    });
    const m = new Mailer(
      mailConfig({
        smtpUrl: smtp.url,
        from: "kairos@example.com",
        maxPerWindow: LIMIT,
        windowMs: 60_000,
      }),
      { clock: systemClock, log: () => undefined },
    );
    mailer = m;
    const l = new SubscriptionLookup(() => buckets.tenants, systemClock);
    lookup = l;
    const o = new DeadLetterOutbox({
      runs: () => buckets.runs,
      held: () => [3],
      webhook: async () => undefined,
      subscriptions: (id) => l.of(id),
      mailer: m,
      clock: systemClock,
      log: () => undefined,
    });
    outbox = o;
    const events = new RunEvents(l, o);
    await events.start(); // the subscriptions followed by one watch, as on a scheduler node
    const started = Date.now();
    // The storm: every run end at once, as a burst's completions arrive (64 in flight).
    let next = 0;
    await Promise.all(
      Array.from({ length: 64 }, async () => {
        while (next < STORM) await events.ended(3, failedRun(next++));
      }),
    );
    const stormMs = Date.now() - started;
    assert.ok(stormMs < 60_000, `the storm fits in one minute (${stormMs} ms)`);
    assert.deepEqual(await buckets.runs.list("ob.>"), [], "every entry delivered and deleted");
    assert.equal(m.stats.held, STORM - LIMIT);
    await smtp.waitFor((ms) => ms.length >= LIMIT + 1, 120_000, "the event mails and the digest");
    const digests = smtp.mails.filter((x) => x.headers["x-kairos-digest"] !== undefined);
    assert.equal(digests.length, 1, "one digest");
    assert.equal(digests[0]!.headers["x-kairos-digest"], String(STORM - LIMIT));
    assert.equal(smtp.mails.length, LIMIT + 1, "no other mail");
    assert.equal(m.stats.digests, 1);
    assert.equal(m.stats.dropped, 0);
    assert.equal(m.stats.failed, 0);
    assert.ok(smtp.mails.every((x) => x.to.join() === "ops@example.com"));
    console.log(
      `storm: ${STORM} run.failed events through the outbox in ${stormMs} ms; ${smtp.mails.length} mails (${LIMIT} + 1 digest)`,
    );
  });
});
