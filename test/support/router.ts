/**
 * An `ActorRouter` for unit tests over a stand-in bus: cluster `c`, a seeded random, a 2 s
 * deadline and `timerClock`. Pitfall: the system clock's own timers are unref'd, so a router
 * waiting on one (a retry, an attempt timeout) would let the test's event loop end early.
 */
import type { Bus } from "../../src/cluster/bus.ts";
import { ActorRouter, type RouterOptions } from "../../src/cluster/router.ts";
import { systemClock, type Clock } from "../../src/lib/clock.ts";
import { seededRandom } from "../../src/lib/random.ts";

/** The system clock with timers that keep the test's event loop alive (the router's waits). */
export const timerClock: Clock = {
  ...systemClock,
  setTimer(delayMs, fn) {
    const t = setTimeout(fn, Math.max(0, delayMs));
    return () => clearTimeout(t);
  },
};

/** A router on `bus` with the tests' defaults; `extra` names the partitions and overrides. */
export function testRouter(
  bus: Bus,
  extra: Pick<RouterOptions, "partitions"> & Partial<RouterOptions>,
): ActorRouter {
  return new ActorRouter({
    nc: bus,
    clusterName: "c",
    clock: timerClock,
    random: seededRandom(1),
    deadlineMs: 2_000,
    ...extra,
  });
}
