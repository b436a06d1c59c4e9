/**
 * Dead letters (src/notify/dead-letters.ts) on the in-memory KV: the job shell records a
 * dead-lettered run's list key and outbox entry with its terminal record (and nothing for other
 * endings); the outbox delivers an entry and deletes it only when it is done, keeps it with a
 * backoff after a failure (so a later sweep — on this node or the partition's next owner —
 * delivers it), delivers only entries of held partitions, and gives up after `maxTries`.
 * The kill -9 case on real processes is test/e2e/dead-letter-outbox.test.ts.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { Bus } from "../../../src/cluster/bus.ts";
import { decode } from "../../../src/cluster/codec.ts";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { DEFAULT_JOB_CONFIG, type JobEffect } from "../../../src/job-state/job-types.ts";
import { jobRegistration } from "../../../src/jobs/job-shell.ts";
import {
  DeadLetterOutbox,
  deadLetterKey,
  outboxKey,
  recordDeadLetter,
} from "../../../src/notify/dead-letters.ts";
import { WebhookSender } from "../../../src/notify/webhook.ts";
import type { RunStatus, RunView } from "../../../src/protocol/model.ts";
import type { SubscriptionRecord } from "../../../src/protocol/events.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { seededRandom } from "../../../src/lib/random.ts";
import { WorkerDirectory } from "../../../src/slots/worker-directory.ts";
import { ownerContext } from "../../support/shell-context.ts";

function run(status: RunStatus, runId = "r1", tenantId = "t1"): RunView {
  return {
    run_id: runId,
    job_id: "j1",
    tenant_id: tenantId,
    scheduled_for: "2024-01-01T00:00:00Z",
    trigger: "manual",
    status,
    attempt: 1,
    attempts: [],
    created_at: "2024-01-01T00:00:00Z",
    started_at: null,
    finished_at: "2024-01-01T00:00:01Z",
    next_attempt_at: null,
    result: { exit_code: 7, output: "" },
    reason: "dead-lettered after 1 attempt(s)",
  };
}

/** A sender that answers from a script instead of the network, recording what it was sent. */
class ScriptedSender extends WebhookSender {
  readonly sent: { headers: Record<string, string>; body: string }[] = [];
  readonly #answer: () => { status: number } | { refused: string } | { error: string };
  constructor(answer: () => { status: number } | { refused: string } | { error: string }) {
    super();
    this.#answer = answer;
  }
  override async post(_url: URL, headers: Record<string, string>, body: string) {
    this.sent.push({ headers, body });
    return this.#answer();
  }
}

function outboxSetup(
  answer: () => { status: number } | { refused: string } | { error: string },
  opts: { held?: number[]; webhook?: boolean; maxTries?: number } = {},
) {
  const runs = new MemoryKv("runs");
  const clock = new FakeClock(1_000_000);
  const sender = new ScriptedSender(answer);
  const logs: string[] = [];
  const outbox = new DeadLetterOutbox({
    runs: () => runs,
    held: () => opts.held ?? [3],
    clock,
    postAttempts: 1,
    log: (_l, m) => logs.push(m),
    webhook: async () =>
      opts.webhook === false
        ? undefined
        : { url: "https://hooks.example.com/k", secret: "s", sender },
    ...(opts.maxTries !== undefined ? { maxTries: opts.maxTries } : {}),
  });
  return { runs, clock, sender, outbox, logs };
}

describe("dead letters: the job shell's write path", () => {
  function shell(runs: MemoryKv) {
    const clock = new FakeClock(0);
    const bus: Bus = {
      publish: () => undefined,
      request: async () => ({ data: new Uint8Array() }),
      subscribe: () => ({ unsubscribe: () => undefined }),
      flush: async () => undefined,
      isClosed: () => false,
    };
    const outbox = new DeadLetterOutbox({
      runs: () => runs,
      held: () => [3],
      clock,
      log: () => undefined,
      webhook: async () => undefined,
    });
    const reg = jobRegistration(DEFAULT_JOB_CONFIG, {
      log: () => undefined,
      clock,
      workers: {
        nc: bus,
        clusterName: "c",
        directory: new WorkerDirectory(clock, seededRandom(1), 60_000),
      },
      history: { runs },
      slots: {
        router: () => {
          throw new Error("no router in this test");
        },
      },
      deadLetters: { outbox },
    });
    const ctx = ownerContext({ type: "job", id: "t1.j1" }, 3);
    return (record: RunView, mode: "create" | "update" | "terminal" | "settle") =>
      reg.perform!([{ kind: "put_run", record, mode } satisfies JobEffect], ctx);
  }

  it("a failed or timed-out terminal record writes the dead-letter and outbox keys; other endings write neither", async () => {
    const runs = new MemoryKv("runs");
    const put = shell(runs);
    await put(run("failed", "r1"), "update");
    await put(run("timed_out", "r2"), "update");
    for (const s of ["succeeded", "cancelled"] as const) await put(run(s, `r_${s}`), "update");
    await put(run("missed", "r_missed"), "terminal");
    assert.deepEqual(
      (await runs.list("dl.>")).map((e) => e.key),
      [deadLetterKey("t1", "r1"), deadLetterKey("t1", "r2")],
    );
    assert.deepEqual(
      (await runs.list("ob.>")).map((e) => e.key),
      [outboxKey(3, "t1", "r1"), outboxKey(3, "t1", "r2")],
    );
    assert.equal(
      decode<RunView>((await runs.get(deadLetterKey("t1", "r1")))!.value).status,
      "failed",
    );
  });

  it("recording twice (a replay after a crash) writes each key once", async () => {
    const runs = new MemoryKv("runs");
    await recordDeadLetter(runs, 3, run("failed"));
    const first = (await runs.list(">")).map((e) => [e.key, e.revision]);
    await recordDeadLetter(runs, 3, run("failed"));
    assert.deepEqual(
      (await runs.list(">")).map((e) => [e.key, e.revision]),
      first,
    );
  });
});

describe("dead letters: the outbox", () => {
  it("delivers with the run id as delivery id, then deletes the entry; the list key stays", async () => {
    const t = outboxSetup(() => ({ status: 204 }));
    await recordDeadLetter(t.runs, 3, run("failed"));
    await t.outbox.kick(3, "t1", "r1");
    assert.equal(t.sender.sent.length, 1);
    assert.equal(t.sender.sent[0]!.headers["kairos-delivery-id"], "r1");
    assert.equal(JSON.parse(t.sender.sent[0]!.body).run.run_id, "r1");
    assert.equal(await t.runs.get(outboxKey(3, "t1", "r1")), null);
    assert.ok(await t.runs.get(deadLetterKey("t1", "r1")));
  });

  it("a failed delivery stays with a backoff; a later sweep delivers it (what a new owner does after a crash)", async () => {
    let status = 503;
    const t = outboxSetup(() => ({ status }));
    await recordDeadLetter(t.runs, 3, run("failed"));
    await t.outbox.kick(3, "t1", "r1");
    const kept = decode<{ tries: number; next_at_ms: number }>(
      (await t.runs.get(outboxKey(3, "t1", "r1")))!.value,
    );
    assert.deepEqual(kept, { ...kept, tries: 1, next_at_ms: 1_000_000 + 5_000 });
    await t.outbox.sweep();
    assert.equal(t.sender.sent.length, 1, "not due yet: not sent again");
    status = 200;
    t.clock.advance(5_000);
    // A fresh outbox (another node) finds the entry in KV.
    const other = new DeadLetterOutbox({
      runs: () => t.runs,
      held: () => [3],
      clock: t.clock,
      postAttempts: 1,
      log: () => undefined,
      webhook: async () => ({ url: "https://hooks.example.com/k", secret: "s", sender: t.sender }),
    });
    await other.sweep();
    assert.equal(t.sender.sent.length, 2);
    assert.equal(t.sender.sent[1]!.headers["kairos-delivery-id"], "r1");
    assert.equal(await t.runs.get(outboxKey(3, "t1", "r1")), null);
  });

  it("delivers only entries of the partitions this node holds", async () => {
    const t = outboxSetup(() => ({ status: 204 }), { held: [1, 2] });
    await recordDeadLetter(t.runs, 3, run("failed"));
    await t.outbox.sweep();
    await t.outbox.kick(3, "t1", "r1");
    assert.equal(t.sender.sent.length, 0);
    assert.ok(await t.runs.get(outboxKey(3, "t1", "r1")));
  });

  it("no webhook, a refused destination or a 4xx: the entry is done, not retried", async () => {
    for (const [answer, webhook] of [
      [() => ({ status: 204 }), false],
      [() => ({ refused: "blocked address" }), true],
      [() => ({ status: 404 }), true],
    ] as const) {
      const t = outboxSetup(answer, { webhook });
      await recordDeadLetter(t.runs, 3, run("failed"));
      await t.outbox.sweep();
      assert.equal(await t.runs.get(outboxKey(3, "t1", "r1")), null);
      assert.equal(t.sender.sent.length, webhook ? 1 : 0);
    }
  });

  it("a delivery dropped by the per-tenant bound is not a try: the entry stays as it was", async () => {
    const t = outboxSetup(() => ({ status: 204 }));
    t.sender.limit = async () => undefined; // the tenant's wait list is full
    await recordDeadLetter(t.runs, 3, run("failed"));
    const before = (await t.runs.get(outboxKey(3, "t1", "r1")))!;
    await t.outbox.sweep();
    assert.deepEqual(await t.runs.get(outboxKey(3, "t1", "r1")), before);
  });

  it("one sweep delivers the due entries of every held partition, and only those", async () => {
    const t = outboxSetup(() => ({ status: 204 }), { held: [3, 5] });
    await recordDeadLetter(t.runs, 3, run("failed", "r1"));
    await recordDeadLetter(t.runs, 5, run("failed", "r2"));
    await recordDeadLetter(t.runs, 4, run("failed", "r3"));
    await t.outbox.sweep();
    assert.deepEqual(t.sender.sent.map((x) => x.headers["kairos-delivery-id"]).sort(), [
      "r1",
      "r2",
    ]);
    assert.deepEqual(
      (await t.runs.list("ob.>")).map((e) => e.key),
      [outboxKey(4, "t1", "r3")],
    );
  });

  it("gives up after maxTries failed deliveries (logged)", async () => {
    const t = outboxSetup(() => ({ error: "connection reset" }), { maxTries: 3 });
    await recordDeadLetter(t.runs, 3, run("failed"));
    for (let i = 0; i < 3; i++) {
      await t.outbox.sweep();
      t.clock.advance(600_000);
    }
    assert.equal(t.sender.sent.length, 3);
    assert.equal(await t.runs.get(outboxKey(3, "t1", "r1")), null);
    assert.ok(t.logs.includes("dead-letter webhook given up"));
  });
});

describe("run events: the outbox fans out to subscriptions", () => {
  const sub = (id: string, over: Partial<SubscriptionRecord>): SubscriptionRecord => ({
    subscription_id: id,
    tenant_id: "t1",
    events: ["run.dead_lettered", "run.succeeded"],
    job_id: null,
    webhook: null,
    email: null,
    created_at: "2024-01-01T00:00:00Z",
    ...over,
  });

  it("a dead letter reaches the tenant webhook and each subscription once; a failed one alone is retried", async () => {
    const runs = new MemoryKv("runs");
    const clock = new FakeClock(1_000_000);
    let subStatus = 503;
    const sender = new ScriptedSender(() => ({ status: 204 }));
    const subSender = new (class extends WebhookSender {
      readonly sent: Record<string, string>[] = [];
      override async post(_u: URL, headers: Record<string, string>) {
        this.sent.push(headers);
        return { status: subStatus };
      }
    })();
    const subs = [
      sub("sa", { webhook: { url: "https://a.example.com/k" }, secret: "sa-secret" }),
      sub("sb", { job_id: "other-job", webhook: { url: "https://b.example.com/k" }, secret: "x" }),
      sub("sc", {
        events: ["run.failed"],
        webhook: { url: "https://c.example.com/k" },
        secret: "y",
      }),
    ];
    const outbox = new DeadLetterOutbox({
      runs: () => runs,
      held: () => [3],
      clock,
      postAttempts: 1,
      log: () => undefined,
      webhook: async () => ({ url: "https://hooks.example.com/k", secret: "s", sender }),
      subscriptions: async () => subs,
      webhookSender: subSender,
    });
    await recordDeadLetter(runs, 3, run("failed"));
    await outbox.kick(3, "t1", "r1");
    assert.equal(sender.sent.length, 1, "the tenant webhook, legacy body");
    assert.equal(JSON.parse(sender.sent[0]!.body).type, "run.dead_lettered");
    assert.equal(subSender.sent.length, 1, "only the matching subscription (job and event)");
    assert.equal(subSender.sent[0]!["kairos-delivery-id"], "r1:run.dead_lettered");
    const kept = decode<{ done: string[]; tries: number }>(
      (await runs.get(outboxKey(3, "t1", "r1")))!.value,
    );
    assert.deepEqual(kept.done, ["tenant"]);
    assert.equal(kept.tries, 1);
    subStatus = 200;
    clock.advance(5_000);
    await outbox.sweep();
    assert.equal(sender.sent.length, 1, "the tenant webhook is not sent again");
    assert.equal(subSender.sent.length, 2);
    assert.equal(await runs.get(outboxKey(3, "t1", "r1")), null, "all done: deleted");
  });

  it("addEvent writes a run event's entry, delivers it and deletes it", async () => {
    const runs = new MemoryKv("runs");
    const clock = new FakeClock(1_000_000);
    const sender = new ScriptedSender(() => ({ status: 200 }));
    const outbox = new DeadLetterOutbox({
      runs: () => runs,
      held: () => [3],
      clock,
      postAttempts: 1,
      log: () => undefined,
      webhook: async () => ({ url: "https://hooks.example.com/k", secret: "s", sender }),
      subscriptions: async () => [
        sub("sa", { webhook: { url: "https://a.example.com/k" }, secret: "sa-secret" }),
      ],
      webhookSender: sender,
    });
    await outbox.addEvent(3, "run.succeeded", run("succeeded"));
    assert.equal(sender.sent.length, 1, "the subscription only: not the dead-letter webhook");
    const body = JSON.parse(sender.sent[0]!.body) as { id: string; type: string };
    assert.deepEqual([body.id, body.type], ["r1:run.succeeded", "run.succeeded"]);
    assert.equal(sender.sent[0]!.headers["kairos-event"], "run.succeeded");
    assert.deepEqual(await runs.list("ob.>"), []);
  });
});
