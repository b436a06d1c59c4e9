/**
 * Fencing under churn, with real processes. Increments (each with its own request id, retried
 * until acknowledged) flow to 24 counters while nodes are killed, added, and paused with SIGSTOP
 * past their lease TTL and resumed. Afterwards each counter equals exactly its acknowledged
 * increments (none lost, none applied twice), and the resumed node wrote nothing under an epoch
 * it did not (re)acquire after resuming: every write in the actors bucket carries its writer and
 * epoch, and the test watches them all.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { openBuckets } from "../../src/cluster/buckets.ts";
import { decode } from "../../src/cluster/codec.ts";
import type { KvWatch } from "../../src/cluster/kv.ts";
import { startNats, type NatsFixture } from "../support/nats.ts";
import { spawnNode, until, type NodeProc } from "../support/nodes.ts";
import { testClient, type TestClient } from "../support/client.ts";

const P = 32;
const COUNTERS = 24;
const LEASE_TTL_MS = 2000;

interface Write {
  key: string;
  writer: string;
  epoch: number;
  revision: number;
  atMs: number;
}

describe("fencing under churn", { timeout: 240_000 }, () => {
  let nats: NatsFixture;
  let nodes: NodeProc[] = [];
  let client: TestClient;
  let watchNc: NatsConnection;
  let watch: KvWatch;
  const writes: Write[] = [];

  before(async () => {
    nats = await startNats();
    const spawnOne = (id: string) =>
      spawnNode({
        natsUrl: nats.url,
        creds: nats.credsFor(["scheduler"]),
        nodeId: id,
        partitions: P,
        leaseTtlMs: LEASE_TTL_MS,
      });
    nodes = ["a", "b", "c"].map(spawnOne);
    client = await testClient(nats, P, 60_000);
    watchNc = await nats.connect("fencing-watch");
    await until(
      nodes,
      () => nodes.reduce((n, x) => n + x.held().size, 0) === P,
      30_000,
      "partitions owned",
    );
    const b = await openBuckets(watchNc, { clusterName: "kairos", replicas: 1 });
    watch = await b.actors.watch("counter.>", (c) => {
      if (!c.value) return;
      const v = decode<{ e: number; w: string }>(c.value);
      writes.push({ key: c.key, writer: v.w, epoch: v.e, revision: c.revision, atMs: Date.now() });
    });
  });
  after(async () => {
    watch?.stop();
    await watchNc?.close();
    await client?.close();
    await Promise.all(nodes.map((n) => n.stop()));
    await nats?.stop();
  });

  it("counters equal acknowledged increments; a resumed node writes nothing for lost partitions", async () => {
    const acked = new Array<number>(COUNTERS).fill(0);
    let stop = false;
    let seq = 0;
    const worker = async (w: number) => {
      while (!stop) {
        const c = (seq++ * 7 + w) % COUNTERS;
        const reqId = `w${w}-${seq}`;
        // Retry the same request id until acknowledged: the dedupe window makes it exactly-once.
        for (;;) {
          try {
            await client.router.request(
              { type: "counter", id: `k${c}` },
              { kind: "inc", by: 1, reqId },
            );
            acked[c]!++;
            break;
          } catch (e) {
            if (process.env["DEBUG_FENCE"]) console.error("retry", reqId, String(e));
            if (String(e).includes("invalid_argument")) throw e;
            await new Promise((r) => setImmediate(r));
          }
        }
      }
    };
    const total = () => acked.reduce((a, b) => a + b, 0);
    const load = Promise.all(Array.from({ length: 6 }, (_, w) => worker(w)));
    const progress = async (n: number, phase: string) => {
      const target = total() + n;
      if (process.env["DEBUG_FENCE"]) console.error("phase", phase, total());
      await until(nodes, () => total() >= target, 60_000, phase);
    };

    await progress(200, "warm-up");
    // 1. kill -9 one node.
    const [a, b, c] = nodes as [NodeProc, NodeProc, NodeProc];
    c.signal("SIGKILL");
    await c.exited;
    await progress(200, "after kill -9");
    // 2. add a node.
    const d = spawnNode({
      natsUrl: nats.url,
      creds: nats.credsFor(["scheduler"]),
      nodeId: "d",
      partitions: P,
      leaseTtlMs: LEASE_TTL_MS,
    });
    nodes = [a, b, d];
    await d.waitFor((e) => e.type === "partition_acquired", 30_000, "d acquires");
    await progress(200, "after join");
    // 3. pause one node past its lease TTL, then resume it.
    const heldBefore = a.held();
    assert.ok(heldBefore.size > 0, "a holds partitions before the pause");
    a.signal("SIGSTOP");
    const others = [b, d];
    await until(
      others,
      () => [...heldBefore].every((p) => b.held().has(p) || d.held().has(p)),
      30_000,
      "a's partitions stolen",
    );
    await progress(200, "while a is paused");
    const resumedAt = Date.now();
    const eventsBeforeResume = a.events.length;
    a.signal("SIGCONT");
    await a.waitFor((e) => e.type === "partition_lost", 10_000, "a notices it lost its leases");
    await progress(300, "after resume");
    stop = true;
    await load;

    // Exactly the acknowledged increments, per counter.
    for (let i = 0; i < COUNTERS; i++) {
      const r = await client.router.request<{ value: number }>(
        { type: "counter", id: `k${i}` },
        { kind: "get" },
      );
      assert.equal(r.value, acked[i], `counter k${i}`);
    }
    // Epochs never go backwards in any key's write history.
    const byKey = new Map<string, Write[]>();
    for (const w of writes) byKey.set(w.key, [...(byKey.get(w.key) ?? []), w]);
    for (const [key, ws] of byKey) {
      for (let i = 1; i < ws.length; i++) {
        assert.ok(
          ws[i]!.epoch >= ws[i - 1]!.epoch,
          `${key}: epoch went back from ${ws[i - 1]!.epoch} to ${ws[i]!.epoch}`,
        );
      }
    }
    // After resuming, node a wrote only under epochs it acquired after resuming.
    const newEpochs = new Set(
      a.events
        .slice(eventsBeforeResume)
        .flatMap((e) => (e.type === "partition_acquired" ? [e.epoch] : [])),
    );
    const stale = writes.filter(
      (w) => w.writer === "a" && w.atMs > resumedAt && !newEpochs.has(w.epoch),
    );
    assert.deepEqual(stale, [], "writes by the resumed node under a lost epoch");
    assert.ok(total() > 1000, `enough traffic: ${total()}`);
  });
});
