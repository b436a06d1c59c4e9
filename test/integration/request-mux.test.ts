/**
 * Kairos's request mux (src/cluster/request-mux.ts) on a real nats-server with the generated
 * least-privilege users: replies reach the right caller, a timeout, no responders, a closed
 * connection and permission violations end a request with the same error types as `nc.request`,
 * and replies go to the inbox prefix of the connection's credentials (`_INBOX_<user>`, the only
 * inbox its permissions allow).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { errors, headers, type Msg, type NatsConnection } from "@nats-io/transport-node";
import { partitionSubject } from "../../src/cluster/router.ts";
import { RequestMux, muxedBus, requestMux } from "../../src/cluster/request-mux.ts";
import { startNats, type NatsFixture } from "../support/nats.ts";
import { openBuckets } from "../../src/cluster/buckets.ts";

const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);
let unique = 0;
/** A subject the scheduler role may publish to (actor commands of partition n). */
const subject = () => partitionSubject("kairos", 1000 + ++unique);

/** The rejection of `p` (fails if it resolves). */
async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof Error, "rejected with a non-Error");
    return e;
  }
  return assert.fail("resolved, expected a rejection");
}

/** Class, message and cause class: what a caller can tell apart. */
function shape(e: Error): {
  name: string;
  message: string;
  cause: string | undefined;
  noResponders: boolean;
} {
  return {
    name: e.constructor.name,
    message: e.message,
    cause: e.cause instanceof Error ? e.cause.constructor.name : undefined,
    noResponders: e instanceof errors.RequestError && e.isNoResponders(),
  };
}

describe("request mux", () => {
  let fx: NatsFixture;
  /** The responder side (admin). */
  let responder: NatsConnection;
  /** The requester: a scheduler identity, whose permissions allow only `_INBOX_scheduler.>`. */
  let sched: NatsConnection;

  before(async () => {
    fx = await startNats();
    responder = await fx.connect("mux-responder");
    sched = await fx.connect("mux-scheduler", ["scheduler"]);
  });
  after(async () => {
    await responder?.close();
    await sched?.close();
    await fx?.stop();
  });

  /** Answers every request on `s` with `re:<data>` after `delayMs(data)`. */
  async function echo(s: string, delayMs: (data: string) => number = () => 0) {
    const sub = responder.subscribe(s, {
      callback: (_e, m) => {
        const d = dec(m.data);
        const reply = () => m.respond(enc(`re:${d}`), m.headers ? { headers: m.headers } : {});
        const ms = delayMs(d);
        if (ms > 0) setTimeout(reply, ms);
        else reply();
      },
    });
    await responder.flush();
    return sub;
  }

  it("resolves with the reply, on the credentials' inbox prefix, with no permission violation", async () => {
    const s = subject();
    let replyTo = "";
    const sub = responder.subscribe(s, {
      callback: (_e, m) => {
        replyTo = m.reply ?? "";
        m.respond(enc(`re:${dec(m.data)}`));
      },
    });
    await responder.flush();
    const mux = requestMux(sched);
    const r = await mux.request(s, enc("ping"), { timeout: 2000 });
    assert.equal(dec(r.data), "re:ping");
    assert.match(mux.replyBase, /^_INBOX_scheduler\.[A-Za-z0-9]+\.$/);
    assert.ok(
      replyTo.startsWith(mux.replyBase),
      `reply subject ${replyTo} is not under ${mux.replyBase}`,
    );
    assert.equal(mux.pending, 0);
    assert.deepEqual(fx.violations(), []);
    sub.unsubscribe();
  });

  it("carries request headers", async () => {
    const s = subject();
    const sub = await echo(s);
    const h = headers();
    h.set("Kairos-Test", "yes");
    const r = await requestMux(sched).request(s, enc("h"), { timeout: 2000, headers: h });
    assert.equal(r.headers?.get("Kairos-Test"), "yes");
    sub.unsubscribe();
  });

  it("rejects with TimeoutError when nobody answers in time, as nc.request does; a late reply is dropped", async () => {
    const s = subject();
    const late: Msg[] = [];
    const sub = responder.subscribe(s, {
      callback: (_e, m) => void (late.push(m), setTimeout(() => m.respond(enc("late")), 400)),
    });
    await responder.flush();
    const mux = requestMux(sched);
    const t0 = Date.now();
    const [mine, theirs] = await Promise.all([
      rejection(mux.request(s, enc("x"), { timeout: 200 })),
      rejection(sched.request(s, enc("x"), { timeout: 200 })),
    ]);
    assert.ok(Date.now() - t0 >= 180, "rejected before the timeout");
    assert.ok(mine instanceof errors.TimeoutError);
    assert.deepEqual(shape(mine), shape(theirs));
    assert.equal(mux.pending, 0);
    await new Promise((r) => setTimeout(r, 400)); // the late replies arrive and are ignored
    assert.equal(late.length, 2);
    assert.equal(mux.pending, 0);
    sub.unsubscribe();
  });

  it("rejects at once with no responders, the same error as nc.request", async () => {
    const s = subject();
    const mux = requestMux(sched);
    const t0 = Date.now();
    const [mine, theirs] = await Promise.all([
      rejection(mux.request(s, enc("x"), { timeout: 5000 })),
      rejection(sched.request(s, enc("x"), { timeout: 5000 })),
    ]);
    assert.ok(Date.now() - t0 < 2000, "no responders should not wait for the timeout");
    assert.ok(mine instanceof errors.RequestError && mine.isNoResponders());
    assert.equal(mine.message, `no responders: '${s}'`);
    assert.deepEqual(shape(mine), shape(theirs));
    assert.equal(mux.pending, 0);
  });

  it("resolves many concurrent requests, answered out of order, each to its own caller", async () => {
    const s = subject();
    const sub = await echo(s, () => Math.floor(Math.random() * 30));
    const bus = muxedBus(sched);
    const n = 2000;
    const replies = await Promise.all(
      Array.from({ length: n }, (_, i) => bus.request(s, enc(String(i)), { timeout: 10_000 })),
    );
    replies.forEach((r, i) => assert.equal(dec(r.data), `re:${i}`));
    assert.equal(requestMux(sched).pending, 0);
    sub.unsubscribe();
  });

  it("fails a refused publish at once (permission violation), as nc.request does", async () => {
    const worker = await fx.connect("mux-worker", ["worker"]);
    try {
      // A worker may not send actor commands: the server refuses the publish.
      const s = subject();
      const mux = new RequestMux(worker);
      const t0 = Date.now();
      const [mine, theirs] = await Promise.all([
        rejection(mux.request(s, enc("x"), { timeout: 5000 })),
        rejection(worker.request(s, enc("x"), { timeout: 5000 })),
      ]);
      assert.ok(Date.now() - t0 < 2000, "a refused publish should not wait for the timeout");
      assert.ok(mine.cause instanceof errors.PermissionViolationError);
      assert.deepEqual(shape(mine), shape(theirs));
      assert.equal(mux.pending, 0);
    } finally {
      await worker.close();
    }
  });

  it("fails pending requests when its inbox subscription is refused (an inbox prefix the user may not use)", async () => {
    const nc = await fx.connect("mux-wrong-inbox", ["scheduler"]);
    try {
      const s = subject();
      const sub = await echo(s);
      const mux = new RequestMux(nc, { inboxPrefix: "_INBOX_api" });
      const e = await rejection(mux.request(s, enc("x"), { timeout: 5000 }));
      assert.ok(
        e instanceof errors.RequestError && e.cause instanceof errors.PermissionViolationError,
        String(e),
      );
      assert.equal(mux.pending, 0);
      sub.unsubscribe();
    } finally {
      await nc.close();
    }
  });

  it("rejects pending requests when the connection closes, and later ones at once, as nc.request does", async () => {
    const nc = await fx.connect("mux-closing", ["scheduler"]);
    const s = subject();
    const sub = responder.subscribe(s, { callback: () => undefined });
    await responder.flush();
    const mux = requestMux(nc);
    const pending = Promise.all([
      rejection(mux.request(s, enc("a"), { timeout: 10_000 })),
      rejection(mux.request(s, enc("b"), { timeout: 10_000 })),
      rejection(nc.request(s, enc("c"), { timeout: 10_000 })),
    ]);
    await nc.flush();
    assert.equal(mux.pending, 2);
    const t0 = Date.now();
    await nc.close();
    const [a, b, theirs] = await pending;
    assert.ok(Date.now() - t0 < 2000, "pending requests should not wait for their timeout");
    assert.equal(a.message, "connection closed");
    assert.deepEqual(shape(a), shape(theirs));
    assert.deepEqual(shape(b), shape(theirs));
    assert.equal(mux.pending, 0);
    const [after, theirsAfter] = await Promise.all([
      rejection(mux.request(s, enc("d"), { timeout: 1000 })),
      rejection(nc.request(s, enc("d"), { timeout: 1000 })),
    ]);
    assert.ok(after instanceof errors.ClosedConnectionError);
    assert.deepEqual(shape(after), shape(theirsAfter));
    sub.unsubscribe();
  });

  it("the KV buckets' JetStream requests (reads, writes, CAS conflicts) go through the mux, never nc.request", async () => {
    const nc = await fx.connect("mux-kv", ["scheduler"]);
    const buckets = await openBuckets(nc, { clusterName: "kairos", replicas: 1 });
    let raw = 0;
    const original = nc.request.bind(nc);
    (nc as { request: typeof nc.request }).request = (...a: Parameters<typeof nc.request>) => {
      raw++;
      return original(...a);
    };
    const before = requestMux(nc).pending;
    const kv = buckets.actors;
    const c = await kv.create("job.1.a", enc("v1"));
    assert.ok(c.ok);
    assert.equal(dec((await kv.get("job.1.a"))!.value), "v1");
    const u = await kv.update("job.1.a", enc("v2"), c.revision);
    assert.ok(u.ok);
    const stale = await kv.update("job.1.a", enc("v3"), c.revision);
    assert.equal(stale.ok, false, "a CAS conflict is still told apart");
    assert.equal(await kv.get("job.1.nope"), null);
    assert.equal(raw, 0, "a KV operation used nc.request");
    assert.equal(requestMux(nc).pending, before);
    await nc.close();
  });
});
