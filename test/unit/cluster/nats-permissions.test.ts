/** The permission table (pure): what each role's NATS user may publish and subscribe to. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  inboxPrefixFor,
  natsPermissions,
  natsUserFor,
  renderAuthorization,
  roleSets,
  servicePermissions,
  serviceUser,
} from "../../../src/cluster/nats-permissions.ts";
import { parseServiceFlags } from "../../../src/cli/nats-auth.ts";

/** NATS subject matching: `*` one token, `>` the rest. */
function matches(pattern: string, subject: string): boolean {
  const p = pattern.split(".");
  const s = subject.split(".");
  for (let i = 0; i < p.length; i++) {
    if (p[i] === ">") return s.length > i;
    if (i >= s.length || (p[i] !== "*" && p[i] !== s[i])) return false;
  }
  return p.length === s.length;
}
const allowed = (list: { allow: string[]; deny?: string[] }, subject: string) =>
  list.allow.some((a) => matches(a, subject)) &&
  !(list.deny ?? []).some((d) => matches(d, subject));

describe("NATS permissions per role", () => {
  it("names users by sorted role set; admin is admin", () => {
    assert.equal(natsUserFor(["worker", "api"]), "api_worker");
    assert.equal(natsUserFor(["scheduler", "scheduler"]), "scheduler");
    assert.equal(natsUserFor("admin"), "admin");
    assert.equal(roleSets().length, 7);
    assert.equal(inboxPrefixFor("api"), "_INBOX_api");
  });

  it("a worker: its start/cancel, heartbeats and completions, membership; no actor commands, no tenants", () => {
    const w = natsPermissions("k", ["worker"], { workerId: "w1", user: "worker-w1" });
    for (const s of [
      "kairos.k.w.3.w1",
      "kairos.k.adverts.w1",
      "kairos.k.node.hb.n",
      "$KV.k_nodes.w1",
    ])
      assert.ok(allowed(w.publish, s), s);
    for (const s of [
      "kairos.k.w.3.w2",
      "kairos.k.w.3",
      "kairos.k.adverts.w2",
      "kairos.k.adverts.*",
      "kairos.k.worker.hb",
    ]) {
      assert.ok(!allowed(w.publish, s), `pinned to its own id: ${s}`);
    }
    const shared = natsPermissions("k", ["worker"]);
    assert.ok(
      allowed(shared.publish, "kairos.k.w.3.w2") && allowed(shared.publish, "kairos.k.adverts.w2"),
      "a shared worker user speaks for any id",
    );
    for (const s of [
      "kairos.k.p.3",
      "$KV.k_tenants.k.abc",
      "$KV.k_tenants.t.x",
      "$KV.k_actors.job.1.t.j",
      "$KV.k_runs.1.t.j.r",
      "$KV.k_cluster.config",
      "$JS.API.DIRECT.GET.KV_k_tenants.$KV.k_tenants.t.x",
      "$JS.API.STREAM.CREATE.KV_k_tenants",
      "_INBOX.abc",
      "kairos.k.worker.w2.start",
      "kairos.k.node.hb.s",
      "kairos.k.node.leave.s",
    ]) {
      assert.ok(!allowed(w.publish, s), s);
    }
    assert.ok(allowed(w.subscribe, "kairos.k.worker.w1.start"));
    assert.ok(!allowed(w.subscribe, "kairos.k.worker.w2.start"), "pinned to its own id");
    assert.ok(
      allowed(w.subscribe, "kairos.k.worker.w1.probe"),
      "its owners' probes of silent leases",
    );
    assert.ok(!allowed(w.subscribe, "kairos.k.worker.w2.probe"));
    assert.ok(!allowed(w.publish, "kairos.k.worker.w2.probe"), "a worker cannot probe another");
    const sched = natsPermissions("k", ["scheduler"]);
    assert.ok(allowed(sched.publish, "kairos.k.worker.w1.probe"), "schedulers probe workers");
    assert.ok(!allowed(w.subscribe, "_INBOX.x"));
    assert.ok(allowed(w.subscribe, "_INBOX_worker-w1.x"));
    assert.ok(!allowed(w.publish, "$KV.k_nodes.w2"), "pinned to its own nodes record");
    assert.ok(!allowed(w.subscribe, "kairos.k.p.1"));
    assert.equal(w.allow_responses, true);
  });

  it("a worker-only identity has two JetStream rights: the partition count's direct get and its own node record", () => {
    for (const w of [
      natsPermissions("k", ["worker"], { workerId: "w1", user: "worker-w1" }),
      natsPermissions("k", ["worker"]),
    ]) {
      assert.ok(allowed(w.publish, "$JS.API.DIRECT.GET.KV_k_cluster.$KV.k_cluster.config"));
      for (const s of [
        "$JS.API.INFO",
        "$JS.API.STREAM.INFO.KV_k_nodes",
        "$JS.API.STREAM.INFO.KV_k_tenants",
        "$JS.API.STREAM.LIST",
        "$JS.API.CONSUMER.CREATE.KV_k_nodes",
        "$JS.API.CONSUMER.CREATE.KV_k_nodes.x.$KV.k_nodes.>",
        "$JS.API.CONSUMER.DURABLE.CREATE.KV_k_nodes.x",
        "$JS.API.DIRECT.GET.KV_k_cluster",
        "$JS.API.DIRECT.GET.KV_k_cluster.$KV.k_cluster.other",
        "$JS.API.DIRECT.GET.KV_k_nodes.$KV.k_nodes.w2",
        "$JS.API.STREAM.MSG.GET.KV_k_cluster",
        "$JS.FC.KV_k_nodes.x",
        "$JS.API.STREAM.PURGE.KV_k_nodes",
        "$KV.k_cluster.config",
      ]) {
        assert.ok(!allowed(w.publish, s), s);
      }
    }
    // Nodes with the api or scheduler role keep reading buckets as before.
    assert.ok(
      allowed(
        natsPermissions("k", ["scheduler", "worker"]).publish,
        "$JS.API.CONSUMER.CREATE.KV_k_actors",
      ),
    );
  });

  it("api writes idem and job counters only; scheduler serves partitions and writes actor state", () => {
    const a = natsPermissions("k", ["api"]);
    assert.ok(allowed(a.publish, "kairos.k.p.0"));
    assert.ok(allowed(a.publish, "$KV.k_tenants.jc.t1"));
    assert.ok(!allowed(a.publish, "$KV.k_tenants.k.hash"));
    assert.ok(!allowed(a.publish, "$KV.k_actors.job.1.t.j"));
    assert.ok(!allowed(a.subscribe, "kairos.k.p.0"));
    const s = natsPermissions("k", ["scheduler"]);
    assert.ok(
      allowed(s.subscribe, "kairos.k.p.0") &&
        allowed(s.subscribe, "kairos.k.w.0.w1") &&
        allowed(s.subscribe, "kairos.k.adverts.w1"),
    );
    assert.ok(
      allowed(s.publish, "$KV.k_actors.job.1.t.j") &&
        allowed(s.publish, "kairos.k.worker.w9.start"),
    );
    assert.ok(!allowed(s.publish, "$KV.k_tenants.t.x"));
    assert.ok(!allowed(s.publish, "kairos.other.p.0"), "another cluster's subjects");
  });

  it("a tenant's service user: only its tenant's NATS API subjects and its own inbox; API nodes serve them", () => {
    const user = serviceUser("billing");
    assert.equal(user, "service-billing");
    const p = servicePermissions("k", "ta", user);
    assert.ok(allowed(p.publish, "kairos.k.api.ta.jobs.create"));
    assert.ok(allowed(p.publish, "kairos.k.api.ta.jobs.get.j1"));
    for (const s of [
      "kairos.k.api.tb.jobs.create",
      "kairos.k.api.*.jobs.create",
      "kairos.k.p.0",
      "kairos.other.api.ta.jobs.list",
      "$KV.k_tenants.t.ta",
      "$JS.API.DIRECT.GET.KV_k_actors",
      "_INBOX_service-billing.x",
      "kairos.k.worker.hb",
    ]) {
      assert.ok(!allowed(p.publish, s), s);
    }
    assert.ok(allowed(p.subscribe, "_INBOX_service-billing.abc"));
    assert.ok(
      !allowed(p.subscribe, "_INBOX.abc") &&
        !allowed(p.subscribe, "kairos.k.api.ta.jobs.create") &&
        !allowed(p.subscribe, "_INBOX_api.x"),
    );
    assert.equal(p.allow_responses, undefined, "it answers nobody");
    const a = natsPermissions("k", ["api"]);
    assert.ok(allowed(a.subscribe, "kairos.k.api.ta.jobs.create"));
    assert.equal(a.allow_responses, true);
    assert.ok(!allowed(natsPermissions("k", ["worker"]).subscribe, "kairos.k.api.ta.jobs.create"));
    assert.ok(
      !allowed(natsPermissions("k", ["scheduler"]).subscribe, "kairos.k.api.ta.jobs.create"),
    );
  });

  it("--service name:tenant flags are validated (no wildcards or dots in the tenant token)", () => {
    assert.deepEqual(parseServiceFlags(["billing:tabc", "etl:tdef,ops:tabc"]), [
      { name: "billing", tenantId: "tabc" },
      { name: "etl", tenantId: "tdef" },
      { name: "ops", tenantId: "tabc" },
    ]);
    for (const bad of [
      "billing",
      "billing:",
      ":ta",
      "b:t.a",
      "b:*",
      "b:>",
      "b:ta:x",
      `${"n".repeat(49)}:ta`,
      "a b:ta",
    ]) {
      assert.throws(() => parseServiceFlags([bad]), /--service/, bad);
    }
    assert.throws(() => parseServiceFlags(["x:ta", "x:tb"]), /twice/);
  });

  it("the tenants' live figures: api identities ask (stats.<node>), schedulers answer; nobody else", () => {
    const subject = "kairos.k.stats.n1";
    assert.ok(allowed(natsPermissions("k", ["api"]).publish, subject));
    assert.ok(allowed(natsPermissions("k", ["scheduler"]).subscribe, subject));
    assert.ok(!allowed(natsPermissions("k", ["api"]).subscribe, subject), "api does not answer");
    assert.ok(!allowed(natsPermissions("k", ["scheduler"]).publish, subject));
    for (const w of [
      natsPermissions("k", ["worker"], { workerId: "w1", user: "worker-w1" }),
      natsPermissions("k", ["worker"]),
    ]) {
      assert.ok(!allowed(w.publish, subject), "a worker cannot ask");
      assert.ok(!allowed(w.subscribe, subject), "a worker cannot listen");
    }
    const svc = servicePermissions("k", "t1", serviceUser("alpha"));
    assert.ok(!allowed(svc.publish, subject), "a tenant's service cannot ask");
    assert.ok(!allowed(svc.subscribe, subject));
  });

  it("renders a config where every subject is quoted (no $variable expansion)", () => {
    const text = renderAuthorization([
      { user: "worker", password: "pw", permissions: natsPermissions("k", ["worker"]) },
    ]);
    assert.match(text, /^authorization: \{/);
    assert.match(text, /"\$JS\.API\.INFO"/);
  });
});
