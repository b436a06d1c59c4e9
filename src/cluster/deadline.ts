/**
 * A request deadline that does not blame the other side for this event loop's own stall.
 *
 * After a long synchronous stretch (a stall of seconds under a burst), Node runs its expired
 * timers before it reads the sockets again: every request in flight then "times out" at once,
 * although its reply may be waiting in the socket — and a timeout is an unknown outcome that
 * costs a read-back and a retry, more load on a node already saturated. Here a deadline that
 * fires late (by more than `STALL_MS`: the loop was not turning) is extended by the time this
 * loop was deaf, once; and any expiry is decided only after one more I/O phase (`setImmediate`
 * runs after the poll phase), so a reply already received is taken, not thrown away.
 */
import type { Clock } from "../lib/clock.ts";

/** A timer this late means the event loop was not turning. */
export const STALL_MS = 100;

/** Arms a deadline: `onExpire` runs unless `cancel` is called first. Returns `cancel`. */
export function armDeadline(clock: Clock, ms: number, onExpire: () => void): () => void {
  let cancelled = false;
  let cancelTimer: () => void = () => undefined;
  const arm = (delay: number, extended: boolean) => {
    const due = clock.monoMs() + delay;
    cancelTimer = clock.setTimer(delay, () => {
      const late = clock.monoMs() - due;
      if (!extended && late > STALL_MS) return arm(Math.min(ms, late), true);
      setImmediate(() => {
        if (!cancelled) onExpire();
      });
    });
  };
  arm(ms, false);
  return () => {
    cancelled = true;
    cancelTimer();
  };
}

/** `p`, or `onTimeout()` thrown once the deadline expires first (see `armDeadline`). */
export function withDeadline<T>(
  p: Promise<T>,
  clock: Clock,
  ms: number,
  onTimeout: () => Error,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const cancel = armDeadline(clock, ms, () => {
      if (settled) return;
      settled = true;
      reject(onTimeout());
    });
    p.then(
      (v) => {
        if (settled) return;
        settled = true;
        cancel();
        resolve(v);
      },
      (e: unknown) => {
        if (settled) return;
        settled = true;
        cancel();
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}
