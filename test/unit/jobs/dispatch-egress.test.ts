/**
 * The dispatcher gives an offer of an egress task its tenant's egress policy as read for that
 * offer (src/runs/dispatcher.ts): a narrowed or cleared policy holds from the next offer on; a
 * task without egress carries none and reads nothing; an unreadable policy is not guessed.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { dispatchOnce } from "../../support/dispatch.ts";
import type { StartRequest, TaskInput } from "../../../src/protocol/worker.ts";

/** Performs one dispatch; answers the offer made (if any), what the actor was told, and the reads. */
async function dispatch(
  task: TaskInput,
  egressPolicy?: (tenantId: string) => Promise<readonly string[] | null>,
): Promise<{ req: StartRequest | undefined; told: string; reads: string[] }> {
  const reads: string[] = [];
  const { req, told } = await dispatchOnce({
    task,
    executor: "docker",
    deps: egressPolicy
      ? {
          egressPolicy: (t: string) => {
            reads.push(t);
            return egressPolicy(t);
          },
        }
      : {},
  });
  return { req, told: told.kind, reads };
}

const task: TaskInput = { image: "i", args: ["true"], env: {}, timeout_s: 30 };

describe("dispatch: egress", () => {
  it("an egress task's offer carries its tenant's policy as read now", async () => {
    const r = await dispatch({ ...task, network: "egress" }, async () => ["example.com:443"]);
    assert.equal(r.told, "claimed");
    assert.deepEqual(r.req?.egress, ["example.com:443"]);
    assert.deepEqual(r.reads, ["t1"]);
  });

  it("a cleared policy, or no reader, gives an empty one: the attempt reaches nothing", async () => {
    assert.deepEqual(
      (await dispatch({ ...task, network: "egress" }, async () => null)).req?.egress,
      [],
    );
    assert.deepEqual((await dispatch({ ...task, network: "egress" })).req?.egress, []);
  });

  it("a task without egress carries none and reads nothing", async () => {
    const r = await dispatch(task, async () => ["example.com"]);
    assert.equal(r.told, "claimed");
    assert.ok(r.req !== undefined && !("egress" in r.req));
    assert.deepEqual(r.reads, []);
  });

  it("an unreadable policy is not guessed: no offer, dispatch_failed", async () => {
    const r = await dispatch({ ...task, network: "egress" }, async () => {
      throw new Error("kv down");
    });
    assert.equal(r.req, undefined);
    assert.equal(r.told, "dispatch_failed");
  });
});
