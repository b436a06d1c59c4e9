/**
 * A KV listing whose server stops answering (here: the nats-server frozen with SIGSTOP) fails
 * with `timeout` instead of hanging: partition loading retries it and a
 * stopping node is not held up by it (a 2-scheduler burst benchmark hung at shutdown this way).
 */
import { describe, it, after } from "node:test";
import { readFileSync } from "node:fs";
import assert from "node:assert/strict";
import { Kvm } from "@nats-io/kv";
import { jetstreamManager } from "@nats-io/jetstream";
import { NatsKv } from "../../src/cluster/kv-nats.ts";
import { isKairosError } from "../../src/lib/errors.ts";
import { startNats, type NatsFixture } from "../support/nats.ts";

/** Resolves once /proc says `pid` is stopped (state T); fails after 5 s. */
async function stopped(pid: number): Promise<void> {
  const state = () => {
    const st = readFileSync(`/proc/${pid}/stat`, "utf8");
    return st.slice(st.lastIndexOf(")") + 2, st.lastIndexOf(")") + 3);
  };
  const deadline = Date.now() + 5000;
  while (state() !== "T") {
    if (Date.now() > deadline)
      assert.fail(`nats-server ${pid} is not stopped after SIGSTOP (state ${state()})`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe("kv list", () => {
  let nats: NatsFixture | undefined;
  after(async () => {
    nats?.servers[0]?.signal("SIGCONT");
    await nats?.stop();
  });

  it(
    "a listing that stops making progress fails with timeout (no hang)",
    { timeout: 60_000 },
    async () => {
      nats = await startNats();
      const nc = await nats.connect("list-stall");
      try {
        const kv = new NatsKv(
          "kairos_stall",
          await new Kvm(nc).create("kairos_stall", { history: 1 }),
          await jetstreamManager(nc),
          5_000,
          undefined,
          1_000,
        );
        for (let i = 0; i < 20; i++) await kv.put(`k.${i}`, new Uint8Array([i]));
        assert.equal((await kv.list("k.*")).length, 20);
        nats.servers[0]!.signal("SIGSTOP");
        // kill(2) returns before every thread of the server has stopped: wait until the kernel
        // reports the process stopped, so no reply can still be on its way.
        await stopped(nats.servers[0]!.pid);
        const started = Date.now();
        await assert.rejects(kv.list("k.*"), (e) => isKairosError(e, "timeout"));
        // Frozen before the watch is set up, the request for the leader's last matching revision
        // times out (5 s); frozen later, the 1 s idle bound ends it. Either way: a timeout, not a hang.
        assert.ok(Date.now() - started < 10_000, `gave up after ${Date.now() - started} ms`);
        nats.servers[0]!.signal("SIGCONT");
      } finally {
        await nc.close().catch(() => undefined);
      }
    },
  );
});
