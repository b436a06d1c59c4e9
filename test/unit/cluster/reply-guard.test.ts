/**
 * Where a responder may answer (src/cluster/reply-guard.ts): only a per-user inbox of an identity
 * that may send the request; never a JetStream API or KV subject, a Kairos subject, the shared
 * inbox under authorization, or another class's inbox.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  inboxModeFor,
  replyRefusal,
  requesterOf,
  type Asker,
} from "../../../src/cluster/reply-guard.ts";
import {
  CLUSTER_ACCOUNT,
  SERVICES_ACCOUNT,
  WORKERS_ACCOUNT,
} from "../../../src/cluster/nats-accounts.ts";
import {
  inboxPrefixFor,
  natsUserFor,
  pinnedWorkerUser,
  roleSets,
  serviceUser,
} from "../../../src/cluster/nats-permissions.ts";

const cmd: Asker = { kind: "actor_command" };
const sched: Asker = { kind: "scheduler" };
const svc: Asker = { kind: "service", tenantId: "t_a" };
const w1: Asker = { kind: "worker", workerIds: ["w1", "w1"] };
const askers = [cmd, sched, svc, w1];
const reply = (user: string) => `${inboxPrefixFor(user)}.Vx3nuid0123.${(42).toString(36)}`;

describe("reply guard", () => {
  it("never answers a subject that is not an inbox, whoever asks", () => {
    const hostile = [
      "$JS.API.STREAM.PURGE.KV_kairos_idem",
      "$KV.kairos_tenants.t.t_b",
      "$JS.API.CONSUMER.CREATE.KV_kairos_nodes",
      "kairos.kairos.p.0",
      "kairos.kairos.worker.w2.start",
      "$SYS.REQ.SERVER.PING",
      "_INBOX_",
      "_INBOX_admin",
      "_INBOX_admin.",
      "_INBOX_admin.a..b",
      "_INBOX_admin.*",
      "_INBOX_admin.>",
      "_INBOX_admin.a b",
      `_INBOX_admin.${"x".repeat(300)}`,
      "x._INBOX_admin.y",
      "",
    ];
    for (const a of askers) {
      for (const mode of ["per_user", "shared"] as const) {
        for (const r of hostile)
          assert.ok(replyRefusal(r, a, mode), `${a.kind}/${mode}: ${r} answered`);
      }
      assert.equal(replyRefusal(undefined, a, "per_user")?.reason, "no_reply");
      assert.equal(replyRefusal("$KV.kairos_tenants.t.x", a, "per_user")?.reason, "not_an_inbox");
    }
  });

  it("a reply nats-server made for an imported request (`_R_.…`): NATS API requests, and worker-plane requests from the worker the header names", () => {
    const info = (acc: string, user: string) => () =>
      JSON.stringify({ acc, user, rtt: 1, kind: "Client" });
    const R = "_R_.aB3xYz.Q9";
    for (const mode of ["per_user", "shared"] as const) {
      assert.equal(replyRefusal(R, svc, mode), undefined);
      for (const bad of ["_R_.", "_R_.a..b", "_R_.>", "_R_.*", "_R_.a b"])
        assert.ok(replyRefusal(bad, svc, mode), bad);
      // Actor commands are not exported: never through an import, whoever the header names.
      assert.equal(
        replyRefusal(R, cmd, mode, info(CLUSTER_ACCOUNT, "api"))?.reason,
        "not_the_asker",
      );
      // The worker plane, from WORKERS: the pinned user of the worker the request names, or the shared one.
      assert.equal(
        replyRefusal(R, w1, mode, info(WORKERS_ACCOUNT, pinnedWorkerUser("w1"))),
        undefined,
      );
      assert.equal(replyRefusal(R, w1, mode, info(WORKERS_ACCOUNT, "worker")), undefined);
      for (const [acc, user] of [
        [WORKERS_ACCOUNT, pinnedWorkerUser("w2")],
        [CLUSTER_ACCOUNT, pinnedWorkerUser("w1")],
        [SERVICES_ACCOUNT, "worker"],
        [WORKERS_ACCOUNT, "admin"],
        [WORKERS_ACCOUNT, "scheduler"],
      ] as const) {
        assert.equal(
          replyRefusal(R, w1, mode, info(acc, user))?.reason,
          "not_the_asker",
          `${acc}/${user}`,
        );
      }
      // Offers and probes cross as streams with the scheduler's own reply: never through a service import.
      for (const roles of roleSets())
        assert.equal(
          replyRefusal(R, sched, mode, info(CLUSTER_ACCOUNT, natsUserFor(roles)))?.reason,
          "not_the_asker",
          roles.join(","),
        );
      assert.equal(
        replyRefusal(R, sched, mode, info(CLUSTER_ACCOUNT, "admin"))?.reason,
        "not_the_asker",
      );
      // No header, or one that is not nats-server's: refused.
      for (const h of [
        undefined,
        "",
        "{",
        "null",
        "[]",
        JSON.stringify({ acc: WORKERS_ACCOUNT }),
        JSON.stringify({ acc: WORKERS_ACCOUNT, user: 7 }),
        JSON.stringify({ acc: WORKERS_ACCOUNT, user: "worker-w1", pad: "x".repeat(5000) }),
      ]) {
        assert.equal(
          replyRefusal(R, w1, mode, () => h)?.reason,
          "not_the_asker",
          String(h).slice(0, 40),
        );
        assert.equal(
          replyRefusal(R, sched, mode, () => h)?.reason,
          "not_the_asker",
          String(h).slice(0, 40),
        );
      }
    }
  });

  it("reads the header only for an imported request's reply", () => {
    let reads = 0;
    const info = () => {
      reads++;
      return JSON.stringify({ acc: WORKERS_ACCOUNT, user: "worker-w1" });
    };
    replyRefusal(reply(pinnedWorkerUser("w1")), w1, "per_user", info);
    replyRefusal("$KV.kairos_tenants.t.x", w1, "per_user", info);
    assert.equal(reads, 0);
    assert.deepEqual(requesterOf(info()), { account: WORKERS_ACCOUNT, user: "worker-w1" });
  });

  it("the shared `_INBOX.` only without credentials (a server without authorization)", () => {
    for (const a of askers) {
      assert.equal(replyRefusal("_INBOX.abc.7", a, "shared"), undefined);
      assert.equal(replyRefusal("_INBOX.abc.7", a, "per_user")?.reason, "not_an_inbox");
    }
    assert.equal(inboxModeFor({}), "shared");
    assert.equal(inboxModeFor({ credsFile: "/x.json" }), "per_user");
  });

  it("actor commands: only api and scheduler identities (and admin)", () => {
    for (const roles of roleSets()) {
      const ok = roles.includes("api") || roles.includes("scheduler");
      assert.equal(
        replyRefusal(reply(natsUserFor(roles)), cmd, "per_user") === undefined,
        ok,
        roles.join(","),
      );
    }
    assert.equal(replyRefusal(reply("admin"), cmd, "per_user"), undefined);
    for (const u of [
      pinnedWorkerUser("w1"),
      serviceUser("alpha"),
      "scheduler_api",
      "api_api",
      "nobody",
      "worker-",
    ]) {
      assert.equal(replyRefusal(reply(u), cmd, "per_user")?.reason, "not_the_asker", u);
    }
  });

  it("offers and probes a worker answers: only scheduler identities (and admin)", () => {
    for (const roles of roleSets()) {
      assert.equal(
        replyRefusal(reply(natsUserFor(roles)), sched, "per_user") === undefined,
        roles.includes("scheduler"),
        roles.join(","),
      );
    }
    assert.equal(replyRefusal(reply("admin"), sched, "per_user"), undefined);
    assert.ok(replyRefusal(reply(pinnedWorkerUser("w1")), sched, "per_user"));
    assert.ok(replyRefusal(reply(serviceUser("alpha")), sched, "per_user"));
  });

  it("reads of a tenant's live figures: only api identities (and admin)", () => {
    const read: Asker = { kind: "api_read" };
    for (const roles of roleSets()) {
      assert.equal(
        replyRefusal(reply(natsUserFor(roles)), read, "per_user") === undefined,
        roles.includes("api"),
        roles.join(","),
      );
    }
    assert.equal(replyRefusal(reply("admin"), read, "per_user"), undefined);
    assert.ok(replyRefusal(reply(pinnedWorkerUser("w1")), read, "per_user"));
    assert.ok(replyRefusal(reply(serviceUser("alpha")), read, "per_user"));
    assert.equal(replyRefusal("_R_.abc.def", read, "per_user")?.reason, "not_the_asker");
    assert.equal(replyRefusal("$KV.kairos_tenants.t.x", read, "per_user")?.reason, "not_an_inbox");
  });

  it("the NATS API: only a service identity (and admin)", () => {
    assert.equal(replyRefusal(reply(serviceUser("alpha")), svc, "per_user"), undefined);
    assert.equal(replyRefusal(reply("admin"), svc, "per_user"), undefined);
    for (const roles of roleSets())
      assert.ok(replyRefusal(reply(natsUserFor(roles)), svc, "per_user"), roles.join(","));
    assert.ok(replyRefusal(reply(pinnedWorkerUser("w1")), svc, "per_user"));
    assert.ok(replyRefusal(reply("service-"), svc, "per_user"));
  });

  it("the worker plane: the pinned identity of the worker every item names, or a shared worker identity", () => {
    assert.equal(replyRefusal(reply(pinnedWorkerUser("w1")), w1, "per_user"), undefined);
    assert.equal(
      replyRefusal(reply(pinnedWorkerUser("w1")), { kind: "worker", workerIds: [] }, "per_user"),
      undefined,
    );
    assert.equal(
      replyRefusal(reply(pinnedWorkerUser("w2")), w1, "per_user")?.reason,
      "not_the_asker",
    );
    assert.equal(
      replyRefusal(
        reply(pinnedWorkerUser("w1")),
        { kind: "worker", workerIds: ["w1", "w2"] },
        "per_user",
      )?.reason,
      "not_the_asker",
    );
    assert.equal(
      replyRefusal(reply(pinnedWorkerUser("w1")), { kind: "worker", workerIds: [""] }, "per_user")
        ?.reason,
      "not_the_asker",
    );
    for (const roles of roleSets()) {
      assert.equal(
        replyRefusal(reply(natsUserFor(roles)), w1, "per_user") === undefined,
        roles.includes("worker"),
        roles.join(","),
      );
    }
    assert.equal(replyRefusal(reply("admin"), w1, "per_user"), undefined);
    assert.ok(replyRefusal(reply(serviceUser("alpha")), w1, "per_user"));
  });
});
