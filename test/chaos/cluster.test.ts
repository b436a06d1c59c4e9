/**
 * Real processes: three `kairos node` schedulers on one nats-server. Every partition has exactly
 * one owner; kill -9 moves a node's partitions to the survivors within 10 s; SIGTERM moves them
 * within 2 s with no request failing; a joining node takes about a third.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { partitionOf } from "../../src/cluster/placement.ts";
import { readClusterStatus } from "../../src/cli/cluster.ts";
import { encode } from "../../src/cluster/codec.ts";
import { startNats, type NatsFixture } from "../support/nats.ts";
import { spawnNode, until, type NodeProc } from "../support/nodes.ts";
import { testClient, type TestClient } from "../support/client.ts";

const P = 32;

function owners(nodes: readonly NodeProc[]): Map<number, string[]> {
  const m = new Map<number, string[]>();
  for (const n of nodes) for (const p of n.held()) m.set(p, [...(m.get(p) ?? []), n.nodeId]);
  return m;
}
function fullyOwned(nodes: readonly NodeProc[]): boolean {
  const m = owners(nodes);
  return m.size === P && [...m.values()].every((o) => o.length === 1);
}
/** A counter id whose partition is `p`. */
function idInPartition(p: number, salt = ""): string {
  for (let i = 0; ; i++)
    if (partitionOf({ type: "counter", id: `c${salt}${i}` }, P) === p) return `c${salt}${i}`;
}

describe("cluster of three kairos nodes", { timeout: 180_000 }, () => {
  let nats: NatsFixture;
  let nodes: NodeProc[] = [];
  let client: TestClient;

  before(async () => {
    nats = await startNats();
    nodes = ["n1", "n2", "n3"].map((id) =>
      spawnNode({
        natsUrl: nats.url,
        creds: nats.credsFor(["scheduler"]),
        nodeId: id,
        partitions: P,
      }),
    );
    client = await testClient(nats, P);
  });
  after(async () => {
    await client?.close();
    await Promise.all(nodes.map((n) => n.stop()));
    await nats?.stop();
  });

  it("every partition has exactly one owner, matching the KV leases", async () => {
    await until(
      nodes,
      () => fullyOwned(nodes) && nodes.every((n) => n.held().size > 0),
      30_000,
      "all partitions owned once",
    );
    // Nodes start one after another, so handoffs may still be in flight: wait until the KV
    // leases and every node's own view agree (re-reading both until they do).
    let agreed = false;
    let last = "";
    for (let i = 0; i < 100 && !agreed; i++) {
      const status = await readClusterStatus(nats.url, "kairos", {
        credsFile: nats.credsFor("admin"),
      });
      const m = owners(nodes);
      assert.equal(status.partitions.length, P);
      agreed =
        fullyOwned(nodes) &&
        status.partitions.every(
          (row) => m.get(row.partition)?.length === 1 && m.get(row.partition)![0] === row.owner,
        );
      last = JSON.stringify(
        status.partitions.filter((row) => m.get(row.partition)?.[0] !== row.owner),
      );
      if (status.nodes.length === 3)
        assert.deepEqual(
          status.nodes.map((n) => n.node_id),
          ["n1", "n2", "n3"],
        );
    }
    assert.ok(agreed, `KV leases and node views disagree: ${last}`);
    // Every node's heartbeat carries its clock: each is judged, and on one machine none is off.
    const status = await readClusterStatus(
      nats.url,
      "kairos",
      { credsFile: nats.credsFor("admin") },
      1_200,
    );
    assert.deepEqual(
      status.nodes.map((n) => typeof n.clock_offset_ms),
      ["number", "number", "number"],
      JSON.stringify(status.nodes),
    );
    assert.deepEqual(status.warnings, []);
  });

  it("cluster status warns of a node whose clock is off (a heartbeat that says so, on the real bus)", async () => {
    const nc = await nats.connect("skewed", "admin");
    const beat = () =>
      nc.publish(
        "kairos.kairos.node.hb.n",
        encode({
          nodeId: "skewed",
          incarnation: "x",
          roles: ["worker"],
          startedAtMs: 0,
          sentMs: Date.now() + 5_000,
        }),
      );
    beat();
    const timer = setInterval(beat, 200);
    try {
      const status = await readClusterStatus(
        nats.url,
        "kairos",
        { credsFile: nats.credsFor("admin") },
        1_200,
      );
      assert.equal(status.warnings.length, 1, JSON.stringify(status.warnings));
      assert.match(
        status.warnings[0]!,
        /^node skewed: clock ahead of the cluster's median by \d+ ms/,
      );
    } finally {
      clearInterval(timer);
      await nc.close();
    }
  });

  it("kill -9: the survivors own the dead node's partitions within 10 s and its actors answer", async () => {
    const victim = nodes[2]!;
    const lostParts = [...victim.held()];
    assert.ok(lostParts.length > 0);
    const ids = lostParts.map((p) => idInPartition(p, "k"));
    for (const id of ids)
      await client.router.request(
        { type: "counter", id },
        { kind: "inc", by: 1, reqId: `${id}-1` },
      );
    victim.signal("SIGKILL");
    await victim.exited;
    const killedAt = Date.now();
    const survivors = nodes.slice(0, 2);
    await until(survivors, () => fullyOwned(survivors), 10_000, "survivors own every partition");
    const tookMs = Date.now() - killedAt;
    for (const id of ids) {
      const r = await client.router.request<{ value: number }>(
        { type: "counter", id },
        { kind: "get" },
      );
      assert.equal(r.value, 1, `counter ${id} kept its state`);
    }
    assert.ok(tookMs <= 10_000, `took ${tookMs} ms`);
    nodes = survivors;
  });

  it("a joining node takes about a third of the partitions", async () => {
    const n4 = spawnNode({
      natsUrl: nats.url,
      creds: nats.credsFor(["scheduler"]),
      nodeId: "n4",
      partitions: P,
    });
    nodes = [...nodes, n4];
    await until(nodes, () => fullyOwned(nodes) && n4.held().size > 0, 30_000, "n4 owns partitions");
    // Placement settles once every node has seen n4; wait for the handoffs to finish.
    await until(
      nodes,
      () => fullyOwned(nodes) && [...nodes].every((n) => n.held().size >= 4),
      15_000,
      "balanced",
    );
    const share = n4.held().size / P;
    assert.ok(share > 0.15 && share < 0.55, `n4 took ${n4.held().size}/${P}`);
  });

  it("SIGTERM: partitions move within 2 s and no request fails meanwhile", async () => {
    const leaving = nodes[0]!;
    const moving = [...leaving.held()];
    assert.ok(moving.length > 0);
    const ids = moving.map((p) => idInPartition(p, "t"));
    let stop = false;
    let ok = 0;
    const failures: string[] = [];
    const load = (async () => {
      for (let i = 0; !stop; i++) {
        const id = ids[i % ids.length]!;
        try {
          await client.router.request(
            { type: "counter", id },
            { kind: "inc", by: 1, reqId: `${id}-t${i}` },
          );
          ok++;
        } catch (e) {
          failures.push(String(e));
        }
      }
    })();
    await until(nodes, () => ok > 20, 10_000, "load running");
    const t0 = Date.now();
    leaving.signal("SIGTERM");
    const rest = nodes.slice(1);
    await until(rest, () => fullyOwned(rest), 5_000, "partitions moved after SIGTERM");
    const movedMs = Date.now() - t0;
    const before = ok;
    await until(rest, () => ok > before + 20, 10_000, "requests flowing after the move");
    stop = true;
    await load;
    assert.equal(await leaving.exited, 0);
    assert.deepEqual(failures, []);
    assert.ok(movedMs <= 2000, `partitions took ${movedMs} ms to move`);
    nodes = rest;
  });
});
