/**
 * The schedulers' live runs (`{kind: "runs"}` on `kairos.<c>.stats.<node>`: src/server/live-runs.ts,
 * stats-responder.ts), attacked with real credentials on a real nats-server (docs/security.md).
 * Tenant A has a run not ended, held in its scheduler's memory: an API identity asking the
 * scheduler for it gets its live view (so the subject answers, and the run is there to leak).
 *
 * Tenant B's service user, A's own service user, the shared worker and a pinned worker each ask
 * the scheduler, with their real credentials, for A's live runs and for A's live figures, and try
 * to listen on the subject (an API node's requests name tenants and runs): every attempt is
 * refused by the server (a permission violation reported to the attacker), and no answer comes.
 * Behind the permission, their accounts do not reach the subject, and the scheduler answers only
 * an `api` identity's inbox (reply-guard.ts): with the permission widened the test fails for want
 * of the refusal; with those two removed as well, on the answers (A's run and figures) it got.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { decode, encode } from "../../../src/cluster/codec.ts";
import type { LiveRunsRequest, NodeLiveRuns } from "../../../src/protocol/live-runs.ts";
import type { KairosProcess } from "../../../src/server/start.ts";
import { statsSubject } from "../../../src/server/stats-responder.ts";
import type { NatsFixture } from "../../support/nats.ts";
import { eventually } from "../../support/kairos.ts";
import {
  allPartitionsHeld,
  asTenant,
  defenceOrEffect,
  nextPermissionError,
  outsiders,
  startAttackNode,
  startTwoTenants,
} from "../../support/attack.ts";

const TA = "tliveaaaaaaaaaaaa";
const TB = "tlivebbbbbbbbbbbb";
const NODE = "live-1";
const SUBJECT = statsSubject("kairos", NODE);

const spec = {
  name: "a's",
  schedule: { cron: "0 0 1 1 *", time_zone: "UTC" }, // never fires on its own during the test
  task: { image: "busybox", args: ["true"], timeout_s: 5 },
};

describe("live runs: only an API identity gets a scheduler's answer", { timeout: 180_000 }, () => {
  let nats: NatsFixture;
  let admin: NatsConnection;
  let node: KairosProcess;
  /** A's run, waiting for a worker (the node has none): live in its job actor's memory. */
  let runA: string;

  /** What a scheduler answers an API identity asking for A's run (undefined: not live there). */
  const askAsApi = async (): Promise<NodeLiveRuns | undefined> => {
    const nc = await nats.connect("live-api", ["api"]);
    try {
      const body: LiveRunsRequest = { kind: "runs", tenant_id: TA, run_ids: [runA] };
      const m = await nc.request(SUBJECT, encode(body), { timeout: 5_000 });
      const a = decode<NodeLiveRuns>(m.data);
      return a.runs.some((r) => r.run_id === runA) ? a : undefined;
    } finally {
      await nc.close();
    }
  };

  before(async () => {
    ({ nats, admin } = await startTwoTenants(TA, TB, "live-admin"));
    node = await startAttackNode(nats, {
      nodeId: NODE,
      roles: ["api", "scheduler"],
      partitions: 4,
    });
    await allPartitionsHeld(node);
    runA = await asTenant(nats, "alpha", TA, async (a) => {
      const { job } = await a.createJob(spec);
      return (await a.runNow(job.job_id)).run_id;
    });
    const live = await eventually(askAsApi, 20_000, "the scheduler answers A's live run");
    assert.equal(live.node, NODE);
    assert.deepEqual(
      live.runs.map((r) => [r.run_id, r.tenant_id]),
      [[runA, TA]],
    );
  });

  after(async () => {
    await node?.stop();
    await admin?.close();
    await nats?.stop();
  });

  const attackers = outsiders(
    () => nats,
    [
      { who: "tenant B's service user", name: "beta" },
      { who: "tenant A's own service user", name: "alpha" },
    ],
    "live",
  );

  for (const a of attackers) {
    it(`${a.who}: asking a scheduler for A's live runs or figures is refused, unanswered`, async () => {
      const nc = await a.connect();
      const through: string[] = [];
      try {
        const asks: { what: string; body: unknown }[] = [
          { what: "A's live runs", body: { kind: "runs", tenant_id: TA, run_ids: [runA] } },
          { what: "A's live figures", body: { tenant_id: TA } },
        ];
        for (const ask of asks) {
          let answer: string | undefined;
          const v = nextPermissionError(nc);
          const settled = nc.request(SUBJECT, encode(ask.body), { timeout: 2_000 }).then(
            (m) => {
              let text: string;
              try {
                text = JSON.stringify(decode<unknown>(m.data));
              } catch {
                text = `${m.data.length} bytes`;
              }
              answer = text.includes(runA)
                ? `answered A's run ${runA}: ${text.slice(0, 160)}`
                : `answered ${text.slice(0, 160)}`;
            },
            () => undefined,
          );
          const o = await defenceOrEffect(v, async () => answer, `${a.who} asks ${ask.what}`);
          await settled; // refused, no answer may follow either
          if (o.kind === "effect") through.push(`${ask.what}: ${o.what}`);
          else if (answer !== undefined) through.push(`${ask.what}: refused, yet ${answer}`);
          else assert.deepEqual([o.value.operation, o.value.subject], ["publish", SUBJECT]);
        }
        // Listening for an API node's requests (they name tenants and runs) or the answers.
        for (const subject of [`kairos.kairos.stats.*`, `kairos.kairos.stats.>`]) {
          let heard: string | undefined;
          const v = nextPermissionError(nc);
          nc.subscribe(subject, {
            callback: (e, m) => void (e ? undefined : (heard ??= `${subject} heard ${m.subject}`)),
          });
          await nc.flush().catch(() => undefined);
          // A marker where no scheduler answers (no node of that id).
          admin.publish(statsSubject("kairos", "nobody"), new TextEncoder().encode("marker"));
          await admin.flush();
          const o = await defenceOrEffect(v, async () => heard, `${a.who} subscribe ${subject}`);
          if (o.kind === "effect") through.push(`subscribe ${subject}: ${o.what}`);
          else assert.deepEqual([o.value.operation, o.value.subject], ["subscription", subject]);
        }
      } finally {
        await nc.close();
      }
      assert.deepEqual(through, [], `what ${a.who} got through`);
      // The run was live throughout: the scheduler still answers an API identity with it.
      assert.ok(await askAsApi(), "the scheduler answers an API identity A's live run");
    });
  }
});
