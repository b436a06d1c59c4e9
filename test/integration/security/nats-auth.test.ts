/**
 * The bus is authenticated and least-privilege (docs/security.md, "The bus"): on a real
 * nats-server with the generated users, a connection without credentials is refused, a worker
 * identity cannot write the tenants bucket or send actor commands (the server reports the
 * permission violation), and a forged `tenant_id` on an actor command is refused by the owner.
 */
import { after, before, describe, it } from "node:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { PermissionViolationError } from "@nats-io/nats-core";
import { Kvm } from "@nats-io/kv";
import { systemClock } from "../../../src/lib/clock.ts";
import { seededRandom } from "../../../src/lib/random.ts";
import { isKairosError } from "../../../src/lib/errors.ts";
import { openBuckets } from "../../../src/cluster/buckets.ts";
import { encode } from "../../../src/cluster/codec.ts";
import { connectNats } from "../../../src/cluster/nats.ts";
import { ActorRouter, partitionSubject } from "../../../src/cluster/router.ts";
import { makeNodeConfig } from "../../../src/cluster/config.ts";
import type { NodeEvent } from "../../../src/cluster/events.ts";
import { startKairos, type KairosProcess } from "../../../src/server/start.ts";
import { JOB_ACTOR, TENANT_ACTOR, jobActorId } from "../../../src/protocol/ids.ts";
import { startNats, type NatsFixture } from "../../support/nats.ts";

const PARTITIONS = 4;

/** Resolves with the first error of this kind the connection reports (armed before acting). */
function nextPermissionError(nc: NatsConnection): Promise<PermissionViolationError> {
  return (async () => {
    for await (const s of nc.status()) {
      if (s.type === "error" && s.error instanceof PermissionViolationError) return s.error;
    }
    throw new Error("connection closed before a permission violation was reported");
  })();
}

describe("NATS authorization", () => {
  let nats: NatsFixture;
  let admin: NatsConnection;
  let node: KairosProcess;

  before(async () => {
    nats = await startNats({ workers: ["pw1"] });
    admin = await nats.connect("auth-test-admin");
    await openBuckets(admin, { clusterName: "kairos", replicas: 1 });
    node = await startKairos(
      makeNodeConfig({
        natsUrl: nats.url,
        natsAuth: { credsFile: nats.credsFor(["scheduler"]) },
        nodeId: "auth-sched",
        roles: ["scheduler"],
        partitions: PARTITIONS,
      }),
      { executor: "noop", workerSlots: 1, apiHost: "127.0.0.1", apiPort: 0 },
    );
    await new Promise<void>((resolve) => {
      const check = () => node.node.heldPartitions().length === node.node.partitions;
      if (check()) return resolve();
      const off = node.node.events.on(() => {
        if (check()) {
          off();
          resolve();
        }
      });
    });
  });

  after(async () => {
    await node?.stop();
    await admin?.close();
    await nats?.stop();
  });

  it("refuses a connection without credentials, and one with a wrong password", async () => {
    await assert.rejects(
      connectNats({ url: nats.url, name: "anonymous", connectTimeoutMs: 3000 }),
      (e: unknown) => {
        assert.ok(isKairosError(e, "unavailable"));
        assert.match(
          (e as Error).message,
          /without credentials.*(Authorization Violation|authorization)/i,
        );
        return true;
      },
    );
    const wrong = join(mkdtempSync(join(tmpdir(), "kairos-creds-")), "wrong.json");
    writeFileSync(wrong, JSON.stringify({ user: "admin", password: "not-the-password" }), {
      mode: 0o600,
    });
    await assert.rejects(
      connectNats({ url: nats.url, name: "wrong", credsFile: wrong, connectTimeoutMs: 3000 }),
      (e: unknown) => {
        assert.ok(isKairosError(e, "unavailable"));
        assert.match((e as Error).message, /as "admin".*(Authorization Violation|authorization)/i);
        return true;
      },
    );
    rmSync(dirname(wrong), { recursive: true, force: true });
  });

  it("a worker cannot write the tenants bucket (minting an API key)", async () => {
    const nc = await nats.connect("auth-test-worker", ["worker"]);
    try {
      const kv = await new Kvm(nc).open("kairos_tenants");
      const violation = nextPermissionError(nc);
      await assert.rejects(
        kv.put("k.forged", encode({ tenant_id: "t_victim", key_id: "x", revoked: false })),
      );
      const v = await violation;
      assert.equal(v.operation, "publish");
      assert.equal(v.subject, "$KV.kairos_tenants.k.forged");
      assert.equal(
        await (await new Kvm(admin).open("kairos_tenants")).get("k.forged"),
        null,
        "nothing was written",
      );
      // The server logged the violation and the user (it may log after the client heard it).
      await nats.violationLogged(
        (l) => l.includes("$KV.kairos_tenants.k.forged") && l.includes('"worker"'),
      );
    } finally {
      await nc.close();
    }
  });

  it("a worker can neither read tenant records nor sniff other identities' replies", async () => {
    const nc = await nats.connect("auth-test-worker-read", ["worker"]);
    try {
      const violation = nextPermissionError(nc);
      nc.subscribe("_INBOX.>");
      const v = await violation;
      assert.equal(v.operation, "subscription");
      const kv = await new Kvm(nc).open("kairos_tenants");
      await assert.rejects(kv.get("t.anyone"));
    } finally {
      await nc.close();
    }
  });

  it("a worker cannot send actor commands: a request on a partition subject is refused", async () => {
    const nc = await nats.connect("auth-test-worker-cmd", ["worker"]);
    try {
      const violation = nextPermissionError(nc);
      const subject = partitionSubject("kairos", 0);
      await assert.rejects(
        nc.request(subject, encode({ t: JOB_ACTOR, i: "t_a.j1", m: { kind: "delete" } }), {
          timeout: 2000,
        }),
      );
      const v = await violation;
      assert.equal(v.operation, "publish");
      assert.equal(v.subject, subject);
    } finally {
      await nc.close();
    }
  });

  it("on the worker plane a worker may send only heartbeats and completions", async () => {
    const nc = await nats.connect("auth-test-worker-plane", ["worker"]);
    const refused: NodeEvent[] = [];
    const off = node.node.events.on((e) => {
      if (e.type === "message_refused") refused.push(e);
    });
    try {
      const router = new ActorRouter({
        nc,
        clusterName: "kairos",
        clock: systemClock,
        random: seededRandom(1),
        partitions: PARTITIONS,
        plane: "workers",
        workerId: "w",
        deadlineMs: 5000,
      });
      const job = { type: JOB_ACTOR, id: jobActorId("t_victim", "jvictim00000000000") };
      await assert.rejects(router.request(job, { kind: "delete" }), (e: unknown) =>
        isKairosError(e, "permission_denied"),
      );
      await assert.rejects(
        router.request({ type: TENANT_ACTOR, id: "t_victim" }, { kind: "release", run_id: "x" }),
        (e: unknown) => isKairosError(e, "permission_denied"),
      );
      // A heartbeat passes the plane's filter and reaches the job actor (which knows no such run).
      await assert.rejects(
        router.request(job, {
          kind: "heartbeat",
          run_id: "jvictim00000000000-1",
          fence: 1,
          worker: "w",
        }),
        (e: unknown) => !isKairosError(e, "permission_denied"),
      );
      assert.equal(refused.length, 2);
    } finally {
      off();
      await nc.close();
    }
  });

  it("an api identity cannot write tenant or key records", async () => {
    const nc = await nats.connect("auth-test-api", ["api"]);
    try {
      const kv = await new Kvm(nc).open("kairos_tenants");
      const violation = nextPermissionError(nc);
      await assert.rejects(kv.put("t.forged", encode({ tenant_id: "t_forged" })));
      assert.equal((await violation).subject, "$KV.kairos_tenants.t.forged");
    } finally {
      await nc.close();
    }
  });

  it("a forged tenant_id is rejected by the owner before the job actor sees it", async () => {
    const nc = await nats.connect("auth-test-api-forge", ["api"]);
    try {
      const router = new ActorRouter({
        nc,
        clusterName: "kairos",
        clock: systemClock,
        random: seededRandom(2),
        partitions: PARTITIONS,
        deadlineMs: 5000,
      });
      const spec = {
        schedule: { at: "2099-01-01T00:00:00Z" },
        task: { image: "busybox", command: ["true"] },
      };
      await assert.rejects(
        router.request(
          { type: JOB_ACTOR, id: jobActorId("t_attacker", "jforged0000000000") },
          {
            kind: "create",
            tenant_id: "t_victim",
            job_id: "jforged0000000000",
            spec,
            request_hash: "h",
          },
        ),
        (e: unknown) =>
          isKairosError(e, "permission_denied") && /tenant "t_victim"/.test((e as Error).message),
      );
      await assert.rejects(
        router.request(
          { type: TENANT_ACTOR, id: "t_victim" },
          { kind: "acquire", run_id: "r", job: jobActorId("t_attacker", "j1"), ttl_ms: 1000 },
        ),
        (e: unknown) => isKairosError(e, "permission_denied"),
      );
      // Nothing was stored for the forged job.
      const actors = await new Kvm(admin).open("kairos_actors");
      const keys = await actors.keys("job.*.t_attacker.>");
      const found: string[] = [];
      for await (const k of keys) found.push(k);
      assert.deepEqual(found, []);
      // The same command with a matching tenant is admitted (the guard is not a blanket refusal).
      const ok = await router.request<{ job?: unknown }>(
        { type: JOB_ACTOR, id: jobActorId("t_attacker", "jforged0000000000") },
        {
          kind: "create",
          tenant_id: "t_attacker",
          job_id: "jforged0000000000",
          spec,
          request_hash: "h",
        },
      );
      assert.ok(ok.job, "created");
    } finally {
      await nc.close();
    }
  });

  it("a worker user pinned to its id runs its node and cannot take another worker's offers", async () => {
    const worker = await startKairos(
      makeNodeConfig({
        natsUrl: nats.url,
        natsAuth: { credsFile: nats.auth.credsForWorker("pw1") },
        nodeId: "pw1",
        roles: ["worker"],
      }),
      { executor: "noop", workerSlots: 1, apiHost: "127.0.0.1", apiPort: 0 },
    );
    try {
      const nc = await connectNats({
        url: nats.url,
        name: "auth-test-pinned",
        credsFile: nats.auth.credsForWorker("pw1"),
      });
      try {
        const violation = nextPermissionError(nc);
        nc.subscribe("kairos.kairos.worker.other.start");
        const v = await violation;
        assert.equal(v.operation, "subscription");
        assert.equal(v.subject, "kairos.kairos.worker.other.start");
      } finally {
        await nc.close();
      }
    } finally {
      await worker.stop();
    }
    assert.deepEqual(
      nats
        .violations()
        .filter((l) => l.includes('User "worker-pw1"') && !l.includes("worker.other.start")),
      [],
      "the pinned worker node itself needed nothing more",
    );
  });

  // Last but one: it adds a (fake) second scheduler, which moves partitions away from the node.
  it("a worker cannot pose as a scheduler in membership, nor make a real one leave", async () => {
    const worker = await nats.connect("auth-test-worker-member", ["worker"]);
    const sched = await nats.connect("auth-test-sched-member", ["scheduler"]);
    const membership = node.node.membership!;
    const joined = (id: string) =>
      new Promise<void>((resolve) => {
        const off = node.node.events.on((e) => {
          if (e.type === "member_joined" && e.nodeId === id) {
            off();
            resolve();
          }
        });
      });
    try {
      const violation = nextPermissionError(worker);
      worker.publish(
        "kairos.kairos.node.hb.s",
        encode({ nodeId: "ghost", incarnation: "x", roles: ["scheduler"], startedAtMs: 0 }),
      );
      assert.equal((await violation).subject, "kairos.kairos.node.hb.s");
      // On the subject workers may use, a claim to be a scheduler is not believed.
      const ghost2 = joined("ghost2");
      worker.publish(
        "kairos.kairos.node.hb.n",
        encode({
          nodeId: "ghost2",
          incarnation: "x",
          roles: ["scheduler", "worker"],
          startedAtMs: 0,
        }),
      );
      await ghost2;
      assert.deepEqual(membership.live("scheduler"), ["auth-sched"]);
      assert.ok(membership.live("worker").includes("ghost2"));
      // A real second scheduler (its own identity) is believed; a worker cannot make it leave or
      // rewrite its roles.
      const s2 = { nodeId: "sched-2", incarnation: "i2", roles: ["scheduler"], startedAtMs: 0 };
      const joined2 = joined("sched-2");
      sched.publish("kairos.kairos.node.hb.s", encode(s2));
      await joined2;
      worker.publish(
        "kairos.kairos.node.leave.n",
        encode({ nodeId: "sched-2", incarnation: "i2" }),
      );
      worker.publish(
        "kairos.kairos.node.hb.n",
        encode({ ...s2, incarnation: "i3", roles: ["worker"] }),
      );
      const ghost3 = joined("ghost3"); // same publisher, same subscriber connection: in order
      worker.publish(
        "kairos.kairos.node.hb.n",
        encode({ nodeId: "ghost3", incarnation: "x", roles: ["worker"], startedAtMs: 0 }),
      );
      await ghost3;
      assert.deepEqual(membership.live("scheduler"), ["auth-sched", "sched-2"]);
      assert.ok(membership.isLive("sched-2", "i2"));
    } finally {
      await worker.close();
      await sched.close();
    }
  });

  it("the scheduler node itself, running as the scheduler user, caused no violation", () => {
    assert.deepEqual(
      nats.violations().filter((l) => l.includes('User "scheduler"')),
      [],
    );
  });
});
