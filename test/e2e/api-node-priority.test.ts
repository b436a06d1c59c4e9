/**
 * An API-only node lowers its own CPU priority (nice +10 by default, `--cpu-nice`), so that on a
 * host shared with schedulers its reads take the CPU the dispatch leaves; nodes with the
 * scheduler role keep theirs.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { getPriority } from "node:os";
import { API_NODE_NICE } from "../../src/cli/node-flags.ts";
import { startKairosFixture, type KairosFixture } from "../support/kairos.ts";

describe("API node CPU priority", { timeout: 120_000 }, () => {
  let fx: KairosFixture;
  const base = getPriority();

  before(async () => {
    fx = await startKairosFixture();
  });
  after(async () => {
    await fx.stop();
  });

  it("an api-only node runs at nice +10; an api,scheduler node at the nice it was started with", async () => {
    const api = fx.spawn("prio-api", "api");
    const both = fx.spawn("prio-both", "api,scheduler");
    await fx.apiUrl(api);
    await fx.apiUrl(both);
    assert.equal(getPriority(api.pid), Math.min(19, base + API_NODE_NICE));
    assert.equal(getPriority(both.pid), base);
  });

  it("--cpu-nice sets the amount, 0 keeps the priority", async () => {
    const zero = fx.spawn("prio-zero", "api", ["--cpu-nice", "0"]);
    const three = fx.spawn("prio-three", "api,scheduler", ["--cpu-nice", "3"]);
    await fx.apiUrl(zero);
    await fx.apiUrl(three);
    assert.equal(getPriority(zero.pid), base);
    assert.equal(getPriority(three.pid), Math.min(19, base + 3));
  });
});
