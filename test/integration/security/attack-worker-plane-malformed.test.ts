/**
 * Malformed worker-plane requests (docs/security.md, "The worker plane"): a pinned worker may
 * send requests on its own worker-plane subject, and the partition owner (a scheduler) answers
 * them. Every body and every batch item is untrusted: a batch of `[null]` once threw inside the
 * owner's delivery, an unhandled rejection that ends a Node process — one message from any worker
 * identity crashed the scheduler that owned the partition. On a real nats-server, with worker
 * w1's pinned credentials, each malformed body must be answered with an error, and the owner must
 * go on serving (the NATS API on the same node still answers).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { decode, encode } from "../../../src/cluster/codec.ts";
import { connectNats } from "../../../src/cluster/nats.ts";
import { workerPlaneSubject } from "../../../src/cluster/router.ts";
import type { KairosProcess } from "../../../src/server/start.ts";
import { NatsApiClient } from "../../../src/client/nats-api-client.ts";
import { startNats, type NatsFixture } from "../../support/nats.ts";
import { eventually } from "../../support/kairos.ts";
import { putVictimTenant, startAttackNode } from "../../support/attack.ts";

const TA = "twpmalformedaaaaa";

/** Bodies a worker may send on its own worker-plane subject that are not well-formed requests. */
const BODIES: { what: string; body: unknown; item: boolean }[] = [
  { what: "a batch of [null]", body: { b: [null] }, item: true },
  { what: 'a batch of [5, "x", []]', body: { b: [5, "x", []] }, item: true },
  {
    what: "a batch item without an id",
    body: { b: [{ t: "job", m: { kind: "heartbeat", worker: "w1" } }] },
    item: true,
  },
  {
    what: "a batch item with numbers for type and id",
    body: { b: [{ t: 1, i: 2, m: { kind: "heartbeat", worker: "w1" } }] },
    item: true,
  },
  {
    what: "a request without an id",
    body: { t: "job", m: { kind: "complete", worker: "w1" } },
    item: false,
  },
  {
    what: "a request with an object for its type",
    body: { t: { toString: 1 }, i: "x", m: null },
    item: false,
  },
];

type Reply = { ok: boolean; v?: { ok: boolean; e?: { code: string } }[]; e?: { code: string } };

describe("malformed worker-plane requests from a worker", { timeout: 120_000 }, () => {
  let nats: NatsFixture;
  let admin: NatsConnection;
  let svc: NatsConnection;
  let attacker: NatsConnection;
  let sched: KairosProcess;
  let api: NatsApiClient;

  before(async () => {
    nats = await startNats({ workers: ["w1"], services: [{ name: "alpha", tenantId: TA }] });
    admin = await nats.connect("attack-wpm-admin");
    await putVictimTenant(admin, TA);
    sched = await startAttackNode(nats, {
      nodeId: "wpm-sched",
      roles: ["api", "scheduler"],
      partitions: 1,
    });
    svc = await nats.connectService("alpha");
    api = new NatsApiClient(svc, { cluster: "kairos", tenantId: TA });
    attacker = await connectNats({
      url: nats.url,
      name: "attacker-w1-plane",
      credsFile: nats.auth.credsForWorker("w1"),
    });
    // The node answers worker planes only once it holds the partition (after startKairos
    // returns): until then a request meets "no responders", not the defence under test.
    await eventually(
      async () =>
        (await attacker.request(workerPlaneSubject("kairos", 0, "w1"), encode({ b: [] }), {
          timeout: 5000,
        }))
          ? true
          : undefined,
      30_000,
      "the partition owner to answer on w1's worker plane",
    );
  });

  after(async () => {
    await attacker?.close();
    await sched?.stop();
    await svc?.close();
    await admin?.close();
    await nats?.stop();
  });

  for (const c of BODIES) {
    it(`${c.what} is answered with an error, and the owner goes on serving`, async () => {
      const r = decode<Reply>(
        (
          await attacker.request(workerPlaneSubject("kairos", 0, "w1"), encode(c.body), {
            timeout: 5000,
          })
        ).data,
      );
      if (c.item) {
        assert.equal(r.ok, true, JSON.stringify(r));
        assert.ok(
          r.v !== undefined &&
            r.v.length > 0 &&
            r.v.every(
              (x) =>
                !x.ok && (x.e?.code === "invalid_argument" || x.e?.code === "permission_denied"),
            ),
          JSON.stringify(r),
        );
      } else {
        assert.equal(r.ok, false, JSON.stringify(r));
        assert.ok(
          r.e?.code === "invalid_argument" || r.e?.code === "permission_denied",
          JSON.stringify(r),
        );
      }
      // The same node still answers its tenants.
      assert.deepEqual((await api.listJobs()).jobs, []);
    });
  }

  it("no node identity caused a permission violation", () => {
    assert.deepEqual(nats.violations(), []);
  });
});
