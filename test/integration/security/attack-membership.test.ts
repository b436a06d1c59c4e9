/**
 * Malformed membership messages (docs/security.md, "Placement cannot be forged"): every worker
 * identity may publish heartbeats and goodbyes on `kairos.<c>.node.hb|leave.n`, and every node —
 * api, scheduler, worker, in KAIROS and in WORKERS — listens there on its control connection. An
 * exception thrown from a NATS subscription callback ends the client's reader, so one body that
 * is not a heartbeat (`nil`, a number for a node id, an invalid msgpack byte, 100,000 nested
 * arrays) would leave that connection deaf for good: no membership, no adverts, no answers to its
 * node-record writes, on every node at once. On a real nats-server, with the pinned credentials
 * of worker w2, each such body is sent; the scheduler node and the worker node w1 must drop them
 * (counted, `kairos_bus_refusals_total{responder="membership",reason="malformed"}`) and still hear
 * the heartbeat that follows.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { encode } from "../../../src/cluster/codec.ts";
import type { Role } from "../../../src/cluster/config.ts";
import { connectNats } from "../../../src/cluster/nats.ts";
import type { KairosProcess } from "../../../src/server/start.ts";
import { startNats, type NatsFixture } from "../../support/nats.ts";
import { busRefusals, nextEvent, startAttackNode } from "../../support/attack.ts";

const K = "kairos.kairos";

/** Bodies that are not a heartbeat or a goodbye, each one a way the old decoding threw. */
const POISON: { what: string; body: Uint8Array }[] = [
  { what: "nil", body: encode(null) },
  { what: "an invalid msgpack byte", body: new Uint8Array([0xc1]) },
  { what: "100,000 nested arrays", body: new Uint8Array(100_000).fill(0x91) },
  { what: "a truncated array of 2^32 items", body: new Uint8Array([0xdd, 0xff, 0xff, 0xff, 0xff]) },
  {
    what: "a number for a node id, no roles",
    body: encode({ nodeId: 5, incarnation: "x", startedAtMs: 0 }),
  },
  {
    what: "roles that are not a list, no incarnation",
    body: encode({ nodeId: "ghost-x", roles: "worker", startedAtMs: 0 }),
  },
];

describe("malformed membership messages from a worker", { timeout: 120_000 }, () => {
  let nats: NatsFixture;
  const procs: KairosProcess[] = [];
  let sched: KairosProcess;
  let w1: KairosProcess;
  let attacker: NatsConnection;

  before(async () => {
    nats = await startNats({ workers: ["w1", "w2"] });
    const start = (nodeId: string, roles: Role[]) =>
      startAttackNode(nats, { nodeId, roles, partitions: 4 });
    sched = await start("ms-sched", ["api", "scheduler"]);
    procs.push(sched);
    w1 = await start("w1", ["worker"]);
    procs.push(w1);
    attacker = await connectNats({
      url: nats.url,
      name: "attacker-w2-membership",
      credsFile: nats.auth.credsForWorker("w2"),
    });
  });

  after(async () => {
    await attacker?.close();
    for (const p of procs.reverse()) await p.stop();
    await nats?.stop();
  });

  for (const [i, p] of POISON.entries()) {
    it(`${p.what} as a heartbeat and as a goodbye is dropped, and both nodes still hear the next heartbeat`, async () => {
      const before = await busRefusals("membership", "malformed");
      const ghost = `ghost-${i}`;
      const heard = (proc: KairosProcess) =>
        nextEvent(proc.node.events, (e) => e.type === "member_joined" && e.nodeId === ghost);
      const heardBySched = heard(sched);
      const heardByW1 = heard(w1);
      attacker.publish(`${K}.node.hb.n`, p.body);
      attacker.publish(`${K}.node.leave.n`, p.body);
      // A well-formed heartbeat after them: a node whose reader died never hears it.
      attacker.publish(
        `${K}.node.hb.n`,
        encode({
          nodeId: ghost,
          incarnation: "i1",
          roles: ["worker"],
          startedAtMs: Date.now(),
          sentMs: Date.now(),
        }),
      );
      await attacker.flush();
      const deaf = (who: string) =>
        new Promise<never>((_, reject) =>
          setTimeout(
            () =>
              reject(
                new Error(
                  `${who} heard no heartbeat after ${p.what}: its control connection went deaf`,
                ),
              ),
            10_000,
          ).unref(),
        );
      await Promise.race([heardBySched, deaf("the scheduler node")]);
      await Promise.race([heardByW1, deaf("worker w1")]);
      // Both nodes run in this process: each counted the heartbeat and the goodbye.
      assert.equal((await busRefusals("membership", "malformed")) - before, 4);
    });
  }

  it("no node caused a permission violation", () => {
    assert.deepEqual(nats.violations(), []);
  });
});
