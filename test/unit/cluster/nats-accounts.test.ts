/**
 * The account layout (src/cluster/nats-accounts.ts): exactly the worker protocol's subject
 * families cross between KAIROS and WORKERS, each export names the one account that may import
 * it, and nothing of the cluster's state (actor commands, the NATS API, other buckets, the
 * JetStream API beyond one key's direct get) is exported to workers. The real server's side of
 * it is in test/integration/security/ (attack-jetstream.test.ts "the WORKERS account alone").
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  CLUSTER_ACCOUNT,
  SERVICES_ACCOUNT,
  SYSTEM_ACCOUNT,
  WORKERS_ACCOUNT,
  renderAccounts,
  schedulerInboxes,
  workerCrossings,
} from "../../../src/cluster/nats-accounts.ts";

const user = (u: string) => ({ user: u, password: "p", permissions: {} });

type Account = {
  jetstream?: string;
  users: { user: string }[];
  exports?: (
    | { service: string; accounts: string[]; response_type?: string }
    | { stream: string; accounts: string[] }
  )[];
  imports?: (
    | { service: { account: string; subject: string }; share?: boolean }
    | { stream: { account: string; subject: string } }
  )[];
};

function parse(config: string): Record<string, Account> {
  const m = /^accounts: (\{[\s\S]*?\n\})\nsystem_account:/m.exec(config);
  assert.ok(m, "an accounts block");
  return JSON.parse(m[1]!) as Record<string, Account>;
}

describe("NATS account layout", () => {
  const config = renderAccounts({
    clusters: ["kairos"],
    cluster: [user("api"), user("scheduler"), user("admin")],
    workers: [user("worker-w1"), user("worker")],
    services: [user("service-a")],
    sys: user("sys"),
    calloutIssuer: "AISSUER",
    calloutXkey: "XKEY",
  });
  const accounts = parse(config);

  it("worker-only identities are in WORKERS, which has no JetStream", () => {
    assert.deepEqual(
      Object.keys(accounts).sort(),
      [CLUSTER_ACCOUNT, SERVICES_ACCOUNT, SYSTEM_ACCOUNT, WORKERS_ACCOUNT].sort(),
    );
    assert.deepEqual(
      accounts[WORKERS_ACCOUNT]!.users.map((u) => u.user),
      ["worker-w1", "worker"],
    );
    assert.equal(accounts[WORKERS_ACCOUNT]!.jetstream, undefined);
    assert.equal(accounts[CLUSTER_ACCOUNT]!.jetstream, "enabled");
    // Static users never go to the auth callout.
    for (const u of ["api", "worker-w1", "worker", "service-a", "sys"])
      assert.ok(config.includes(JSON.stringify(u)), u);
    assert.match(config, /"auth_users": \[[^\]]*"worker-w1"/);
  });

  it("exactly the worker protocol crosses, each export to one account", () => {
    const k = "kairos.kairos";
    const imported = (a: Account) =>
      (a.imports ?? [])
        .map((i) =>
          "service" in i
            ? `service ${i.service.account} ${i.service.subject}`
            : `stream ${i.stream.account} ${i.stream.subject}`,
        )
        .sort();
    assert.deepEqual(
      imported(accounts[WORKERS_ACCOUNT]!),
      [
        `service ${CLUSTER_ACCOUNT} $JS.API.DIRECT.GET.KV_kairos_cluster.$KV.kairos_cluster.config`,
        `service ${CLUSTER_ACCOUNT} $KV.kairos_nodes.*`,
        `service ${CLUSTER_ACCOUNT} ${k}.w.*.*`,
        `stream ${CLUSTER_ACCOUNT} ${k}.node.hb.s`,
        `stream ${CLUSTER_ACCOUNT} ${k}.node.leave.s`,
        `stream ${CLUSTER_ACCOUNT} ${k}.worker.*.cancel`,
        `stream ${CLUSTER_ACCOUNT} ${k}.worker.*.probe`,
        `stream ${CLUSTER_ACCOUNT} ${k}.worker.*.start`,
      ].sort(),
    );
    assert.deepEqual(
      imported(accounts[CLUSTER_ACCOUNT]!),
      [
        `stream ${WORKERS_ACCOUNT} ${k}.adverts.*`,
        `stream ${WORKERS_ACCOUNT} ${k}.node.hb.n`,
        `stream ${WORKERS_ACCOUNT} ${k}.node.leave.n`,
        ...schedulerInboxes().map((i) => `stream ${WORKERS_ACCOUNT} ${i}.>`),
      ].sort(),
    );
    assert.deepEqual(schedulerInboxes().sort(), [
      "_INBOX_api_scheduler",
      "_INBOX_api_scheduler_worker",
      "_INBOX_scheduler",
      "_INBOX_scheduler_worker",
    ]);
    // Every service import shares the requester's identity (the `Nats-Request-Info` header).
    for (const i of accounts[WORKERS_ACCOUNT]!.imports ?? [])
      if ("service" in i) assert.equal(i.share, true, i.service.subject);
    // Each export is for exactly the account that imports it; every import has its export.
    for (const [name, a] of Object.entries(accounts)) {
      for (const e of a.exports ?? []) {
        assert.equal(e.accounts.length, 1, JSON.stringify(e));
        const subject = "service" in e ? e.service : e.stream;
        const importer = accounts[e.accounts[0]!]!;
        assert.ok(
          (importer.imports ?? []).some((i) =>
            "service" in i
              ? i.service.account === name && i.service.subject === subject
              : i.stream.account === name && i.stream.subject === subject,
          ),
          `${name} exports ${subject} that ${e.accounts[0]} does not import`,
        );
      }
    }
  });

  it("nothing of the cluster's state is exported to workers", () => {
    const toWorkers = workerCrossings("kairos").cluster.exports.map((e) =>
      "service" in e ? e.service : e.stream,
    );
    for (const s of toWorkers) {
      assert.ok(
        !/\.p\.|\.api\.|tenants|actors|runs|leases|idem|CONSUMER|STREAM\.|\$JS\.API\.>|\$KV\.>/.test(
          s,
        ),
        s,
      );
    }
    assert.ok(
      toWorkers.every((s) => !s.includes(">")),
      "no open-ended subject",
    );
  });
});
