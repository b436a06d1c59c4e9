/** The operators' view from its parts (src/server/operator-view.ts `mergeClusterView`, pure). */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { mergeClusterView, parseNodeOverview } from "../../../src/server/operator-view.ts";
import type { NodeOverview } from "../../../src/protocol/stats.ts";
import { openApiDocument } from "../../../src/http/openapi.ts";
import { validates } from "../http/json-schema-lite.ts";

const T0 = Date.parse("2026-12-06T10:00:00Z");
const w = (id: string, slots = 4) => ({
  worker_id: id,
  executor: "process",
  slots,
  free: 1,
  prefetch: 0,
  standing: "trusted",
});
const node = (n: string, partitions: number[], workers = [w("w1")]): NodeOverview => ({
  v: 1,
  node: n,
  now_ms: T0,
  partitions,
  actors_active: 3,
  mailbox_depth: 0,
  runs_waiting: [2, 1],
  workers,
});

describe("the operators' view", () => {
  it("partitions by holder, workers once each, a silent scheduler marked, shares with use", () => {
    const v = mergeClusterView({
      nowMs: T0,
      partitionCount: 6,
      members: [
        { nodeId: "s2", incarnation: "i", roles: ["scheduler"], startedAtMs: T0, lastSeenMs: T0 },
        {
          nodeId: "s1",
          incarnation: "i",
          roles: ["api", "scheduler"],
          startedAtMs: T0,
          lastSeenMs: T0,
        },
      ],
      schedulers: [
        { node: "s1", answer: node("s1", [0, 1, 2, 9]) },
        { node: "s2", answer: node("s2", [3, 1], [w("w1"), w("w2", 8)]) },
        { node: "s3", answer: undefined },
      ],
      fleet: {
        capacity: 12,
        computed_at_ms: T0,
        tenants: [
          { tenant: "ta", demand: 10, weight: 1, share: 6, used: 5.5 },
          { tenant: "tb", demand: 2, weight: 1, share: 2 },
        ],
      },
    });
    assert.deepEqual(
      v.nodes.map((n) => n.node_id),
      ["s1", "s2"],
    );
    assert.deepEqual(v.partitions.held, [
      { partition: 0, node: "s1" },
      { partition: 1, node: "s1" },
      { partition: 2, node: "s1" },
      { partition: 3, node: "s2" },
    ]);
    assert.deepEqual(v.partitions.unheld, [4, 5], "9 is past the count: ignored");
    assert.deepEqual(
      v.workers.map((x) => [x.worker_id, x.slots, x.seen_by]),
      [
        ["w1", 4, 2],
        ["w2", 8, 1],
      ],
    );
    const s3 = v.schedulers.find((s) => s.node_id === "s3")!;
    assert.equal(s3.answered, false);
    assert.equal(s3.partitions, null);
    assert.deepEqual(v.schedulers[0]!.runs_waiting, { slot: 2, worker: 1 });
    assert.deepEqual(v.fair_shares!.tenants, [
      { tenant_id: "ta", weight: 1, demand: 10, share: 6, used: 5.5 },
      { tenant_id: "tb", weight: 1, demand: 2, share: 2, used: null },
    ]);
    const empty = mergeClusterView({
      nowMs: T0,
      partitionCount: 1,
      members: [],
      schedulers: [],
      fleet: undefined,
    });
    assert.equal(empty.fair_shares, null);
    // What the API sends is what its OpenAPI document says.
    const doc = openApiDocument() as { components: { schemas: Record<string, object> } };
    const schema = doc.components.schemas["ClusterView"] as Record<string, unknown>;
    for (const x of [v, empty]) assert.equal(validates(schema, x, doc), true);
  });

  it("drops an answer that is not a node's overview", () => {
    const good = node("s1", [0]);
    assert.ok(parseNodeOverview(good));
    for (const bad of [
      null,
      { ...good, v: 2 },
      { ...good, partitions: [-1] },
      { ...good, runs_waiting: [1] },
      { ...good, workers: [{ ...w("w1"), slots: -1 }] },
      { ...good, workers: [{ worker_id: 5 }] },
    ])
      assert.equal(parseNodeOverview(bad), undefined, JSON.stringify(bad));
  });
});
