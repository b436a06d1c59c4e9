/**
 * The worker directory each scheduler node keeps: workers advertise their free slots by
 * heartbeat on `kairos.<cluster>.worker.hb`; the directory forgets a worker after
 * `expireAfterMs` without one. `pick()` chooses the worker with the most free slots, counting
 * local reservations made since its last heartbeat so one burst does not pile onto one worker.
 */
import type { Bus, BusSubscription } from "../cluster/bus.ts";
import type { Clock } from "../lib/clock.ts";
import type { Random } from "../lib/random.ts";
import { decode } from "../cluster/codec.ts";

export interface WorkerAdvert {
  worker_id: string;
  slots: number;
  free: number;
  executor: string;
}

interface Entry extends WorkerAdvert {
  seenMs: number;
  reserved: number;
}

export function workerSubject(cluster: string, workerId: string, verb: "start" | "cancel"): string {
  return `kairos.${cluster}.worker.${workerId}.${verb}`;
}

export class WorkerDirectory {
  readonly #workers = new Map<string, Entry>();
  #sub: BusSubscription | undefined;
  constructor(
    private readonly clock: Clock,
    private readonly random: Random,
    private readonly expireAfterMs: number,
  ) {}

  start(nc: Bus, cluster: string): void {
    this.#sub = nc.subscribe(`kairos.${cluster}.worker.hb`, {
      // An error (a permission violation) comes with an empty message: nothing to observe.
      callback: (e, m) => {
        if (!e) this.observe(decode<WorkerAdvert>(m.data));
      },
    });
  }

  stop(): void {
    this.#sub?.unsubscribe();
  }

  observe(a: WorkerAdvert): void {
    this.#workers.set(a.worker_id, { ...a, seenMs: this.clock.now(), reserved: 0 });
  }

  /** Workers believed to have a free slot, best first; `exclude` skips ones that just refused. */
  pick(exclude: ReadonlySet<string> = new Set()): string | undefined {
    const now = this.clock.now();
    let best: Entry | undefined;
    let bestFree = 0;
    for (const [id, w] of this.#workers) {
      if (now - w.seenMs > this.expireAfterMs) {
        this.#workers.delete(id);
        continue;
      }
      if (exclude.has(id)) continue;
      const free = w.free - w.reserved;
      if (free > bestFree || (free === bestFree && free > 0 && this.random.next() < 0.5)) {
        best = w;
        bestFree = free;
      }
    }
    if (best) best.reserved++;
    return best?.worker_id;
  }

  /** A worker refused (full): stop offering it work until its next heartbeat. */
  markFull(workerId: string): void {
    const w = this.#workers.get(workerId);
    if (w) w.reserved = w.free;
  }

  get size(): number {
    return this.#workers.size;
  }
}
