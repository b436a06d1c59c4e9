import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { DevConsole } from "../../../src/dev/console.ts";

const line = (o: Record<string, unknown>): string =>
  JSON.stringify({ level: 30, time: "2026-03-01T10:11:12.000Z", node: "dev", ...o });

describe("kairos dev console", () => {
  it("condenses partition events into one summary line and hides actor events", async () => {
    const out: string[] = [];
    const c = new DevConsole(
      (l) => out.push(l),
      () => 16,
    );
    const printed = new Promise<void>((resolve) => {
      const push = out.push.bind(out);
      out.push = (...l: string[]) => {
        const n = push(...l);
        if (l.some((x) => x.includes("holding"))) resolve();
        return n;
      };
    });
    for (let p = 0; p < 16; p++)
      c.write(
        line({ evt: "partition_acquired", partition: p, epoch: 1, msg: "partition_acquired" }),
      );
    c.write(
      line({
        evt: "actor_activated",
        actorType: "job",
        id: "j1",
        partition: 3,
        msg: "actor_activated",
      }),
    );
    const keepAlive = setTimeout(() => undefined, 5000); // the console's timer is unref'd
    await printed;
    clearTimeout(keepAlive);
    assert.deepEqual(
      out.map((l) => l.replace(/^\d\d:\d\d:\d\d /, "")),
      ["scheduler: holding 16/16 partitions"],
    );
  });

  it("prints worker events as one short line and warnings with their fields", () => {
    const out: string[] = [];
    const c = new DevConsole((l) => out.push(l));
    c.write(
      line({
        evt: "worker_started",
        type: "started",
        run_id: "r1",
        attempt: 2,
        msg: "worker_started",
      }),
    );
    c.write(line({ level: 40, msg: "lease renew failed", err: "timeout" }));
    c.write("not json\n");
    assert.deepEqual(out, [
      "10:11:12 run r1 attempt 2 started",
      "10:11:12 WARN lease renew failed  err=timeout",
      "not json",
    ]);
  });

  it("prints the worker's own events (drain on Ctrl-C) without a run", () => {
    const out: string[] = [];
    const c = new DevConsole((l) => out.push(l));
    c.write(
      line({
        evt: "worker_draining",
        running: 0,
        dropped: 0,
        timeout_ms: 0,
        msg: "worker draining",
      }),
    );
    c.write(
      line({
        evt: "worker_drained",
        finished: 0,
        handed_back: 0,
        dropped: 0,
        left: 0,
        msg: "worker drained",
      }),
    );
    assert.deepEqual(out, [
      "10:11:12 worker draining  running=0 dropped=0 timeout_ms=0",
      "10:11:12 worker drained  finished=0 handed_back=0 dropped=0 left=0",
    ]);
  });

  it("flush prints a pending partition summary at once", () => {
    const out: string[] = [];
    const c = new DevConsole(
      (l) => out.push(l),
      () => 16,
    );
    c.write(line({ evt: "partition_released", partition: 3, msg: "partition_released" }));
    assert.equal(out.length, 0, "not yet: the summary waits for partition events to settle");
    c.flush();
    c.flush();
    assert.deepEqual(
      out.map((l) => l.replace(/^\d\d:\d\d:\d\d /, "")),
      ["scheduler: holding 0/16 partitions"],
    );
  });
});
