/**
 * Stall-aware deadlines on the real event loop: a reply that reached the socket while this loop
 * was blocked is taken, not thrown away as a timeout; a request that gets no reply still times
 * out; a cancelled deadline never fires.
 */
import { it } from "node:test";
import assert from "node:assert/strict";
import { createServer, connect, type AddressInfo } from "node:net";
import { armDeadline, withDeadline } from "../../../src/cluster/deadline.ts";
import { systemClock } from "../../../src/lib/clock.ts";

function blockFor(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    /* busy: no timers, no I/O */
  }
}

it("a reply that arrived while the event loop was blocked past the deadline is taken", async () => {
  const server = createServer((s) => s.on("data", (d) => s.write(d)));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const sock = connect((server.address() as AddressInfo).port, "127.0.0.1");
  await new Promise<void>((r) => sock.once("connect", () => r()));
  try {
    for (let i = 0; i < 5; i++) {
      const reply = new Promise<string>((r) => sock.once("data", (d) => r(d.toString())));
      const result = withDeadline(reply, systemClock, 50, () => new Error("timed out"));
      sock.write(`ping${i}`);
      blockFor(300); // the echo arrives meanwhile; the deadline expires meanwhile
      assert.equal(
        await result,
        `ping${i}`,
        "a naive timer would reject: timers run before the socket is read",
      );
    }
  } finally {
    sock.destroy();
    await new Promise<void>((r) => server.close(() => r()));
  }
});

/** systemClock's timers are unref'd (a node's NATS socket keeps it alive): keep this test alive. */
async function alive<T>(f: () => Promise<T>): Promise<T> {
  const keep = setInterval(() => undefined, 1000);
  try {
    return await f();
  } finally {
    clearInterval(keep);
  }
}

it("no reply: the deadline still expires (extended once by the time the loop was blocked)", () =>
  alive(async () => {
    const started = performance.now();
    const never = new Promise<never>(() => undefined);
    const p = withDeadline(never, systemClock, 50, () => new Error("timed out"));
    blockFor(200);
    await assert.rejects(p, /timed out/);
    const took = performance.now() - started;
    assert.ok(took >= 200 && took < 2000, `took ${took} ms`);
  }));

it("a cancelled deadline never fires", () =>
  alive(async () => {
    let fired = false;
    const cancel = armDeadline(systemClock, 10, () => (fired = true));
    cancel();
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(fired, false);
  }));
