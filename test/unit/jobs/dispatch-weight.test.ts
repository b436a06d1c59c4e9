/**
 * An offer carries its tenant's weight as the node holds it (src/runs/dispatcher.ts
 * `tenantWeight`, the shell's `tenantWeightNow`: no read, an offer never waits): a full worker
 * gives a freed slot to the waiting run whose tenant holds fewest of its slots per weight
 * (src/worker/slot-ledger.ts). No reader or no weight known: no weight (the worker counts 1), and
 * the run is offered all the same.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { dispatchOnce } from "../../support/dispatch.ts";
import type { TaskInput } from "../../../src/protocol/worker.ts";

/** The job shell's slot deps with a weight reader (the router is not used by a dispatch). */
const slots = (tenantWeightNow?: (t: string) => number | undefined) => ({
  slots: {
    router: () => {
      throw new Error("no router in this test");
    },
    ...(tenantWeightNow ? { tenantWeightNow } : {}),
  },
});

const task: TaskInput = { image: "i", args: ["true"], env: {}, timeout_s: 30 };

describe("dispatch: the tenant's weight", () => {
  it("the offer carries the weight read for its tenant", async () => {
    const reads: string[] = [];
    const { req, told } = await dispatchOnce({
      task,
      executor: "docker",
      deps: slots((t: string) => {
        reads.push(t);
        return 2.5;
      }),
    });
    assert.equal(told.kind, "claimed");
    assert.equal(req?.weight, 2.5);
    assert.deepEqual(reads, ["t1"]);
  });

  it("no reader or no weight known: offered without one", async () => {
    for (const deps of [slots(), slots(() => undefined)]) {
      const { req, told } = await dispatchOnce({ task, executor: "docker", deps });
      assert.equal(told.kind, "claimed");
      assert.ok(req !== undefined && !("weight" in req));
    }
  });
});
