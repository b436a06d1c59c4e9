/**
 * What the worker remembers of attempts gone from it, to answer its owners' probes truthfully:
 * whether each started, the completions of reports given up (and of attempts killed at once
 * just after they had exited 0 by themselves), and the attempts killed at once whose result is
 * not in yet. Bounded in entries and in output characters, oldest out first.
 */
import { Fifo } from "../lib/fifo.ts";
import type { Completion } from "../protocol/worker.ts";
import { fencedKey, type Lease } from "./lease.ts";
import { OrderedMap } from "../lib/ordered-map.ts";

/**
 * Attempts gone from this worker remembered for probes (whether each started), oldest forgotten
 * first.
 */
export const FORGOTTEN_LIMIT = 262_144;
/**
 * Completions of reports given up, kept for probes, oldest out first — as many as attempts gone
 * are remembered (`FORGOTTEN_LIMIT`): a given-up report whose completion was evicted answers its
 * probe `started`, and the run's result is lost (a smaller bound loses results in a 200,000-run
 * burst).
 */
export const GIVEN_UP_LIMIT = FORGOTTEN_LIMIT;
/**
 * …and at most this many characters of their output tails in all (UTF-16: up to twice as many
 * bytes); past it the oldest lose their output. Besides, each entry costs ~200 bytes (key,
 * object, error), ~50 MB at GIVEN_UP_LIMIT.
 */
export const GIVEN_UP_OUTPUT_CHARS = 64 * 1024 * 1024;
/** The output of a given-up completion kept once GIVEN_UP_OUTPUT_CHARS is spent. */
export const OUTPUT_NOT_KEPT =
  "[kairos: output not kept — this attempt's completion report was given up under load, and the worker's memory for such outputs was full]";

/**
 * Completions of reports handed over (answered `pending`: queued at their owners, worker/core.ts
 * `handedOver`), kept for the probe of an owner that lost one — as many as those given up, and
 * apart from them, so that a burst's handed-over completions (nearly all settled by their owners,
 * which does not tell the worker) never take the output budget of those given up.
 */
export const HANDED_OVER_LIMIT = FORGOTTEN_LIMIT;
/** …and at most this many characters of their output tails in all. */
export const HANDED_OVER_OUTPUT_CHARS = 32 * 1024 * 1024;
/** The output of a handed-over completion kept once HANDED_OVER_OUTPUT_CHARS is spent. */
export const OUTPUT_NOT_KEPT_HANDED_OVER =
  "[kairos: output not kept — this attempt's completion report was queued at its owner, which lost it, and the worker's memory for such outputs was full]";

/**
 * Completions kept for probes (key#fence), bounded in entries and in output characters, oldest
 * out first; past the output budget the oldest lose their output (`notKept` instead).
 */
export class KeptCompletions {
  readonly #entries = new OrderedMap<string, Completion>();
  /** Characters of output the entries hold (at most `outputChars`). */
  #chars = 0;
  /** Entries holding their output, oldest first (the first to lose it past the budget). */
  #withOutput = new Fifo<string>();

  constructor(
    readonly limit: number,
    readonly outputChars: number,
    readonly notKept: string,
  ) {}

  get size(): number {
    return this.#entries.size;
  }

  get(k: string): Completion | undefined {
    return this.#entries.get(k);
  }

  has(k: string): boolean {
    return this.#entries.has(k);
  }

  /** The characters of output `c` holds (the shared `notKept` costs none). */
  #kept(c: Completion): number {
    return c.output === this.notKept ? 0 : c.output.length;
  }

  set(k: string, c: Completion): void {
    this.#delete(k);
    this.#entries.set(k, c);
    this.#chars += this.#kept(c);
    if (this.#kept(c) > 0) this.#withOutput.push(k);
    while (this.#entries.size > this.limit) this.#delete(this.#entries.oldest()!);
    // Keys of entries evicted or replaced stay in the queue until met: rebuilt once they outnumber
    // the live ones.
    if (this.#withOutput.size > 2 * this.#entries.size + 1024) {
      this.#withOutput = new Fifo<string>();
      for (const [key, kept] of this.#entries) if (this.#kept(kept) > 0) this.#withOutput.push(key);
    }
    while (this.#chars > this.outputChars && this.#withOutput.size > 0) {
      const oldest = this.#withOutput.shift()!;
      const kept = this.#entries.get(oldest);
      if (!kept || this.#kept(kept) === 0) continue; // gone, or kept again since without output
      this.#chars -= this.#kept(kept);
      this.#entries.set(oldest, { ...kept, output: this.notKept });
    }
  }

  #delete(k: string): void {
    const c = this.#entries.get(k);
    if (!c) return;
    this.#entries.delete(k);
    this.#chars -= this.#kept(c);
  }
}

export class AttemptMemory {
  /**
   * Attempts gone from here (key#fence → whether it started), for probes; bounded, oldest out
   * first.
   */
  readonly forgotten = new OrderedMap<string, boolean>();
  /** Completions of reports given up (key#fence), for probes. */
  readonly givenUp = new KeptCompletions(GIVEN_UP_LIMIT, GIVEN_UP_OUTPUT_CHARS, OUTPUT_NOT_KEPT);
  /** Completions of reports handed over (key#fence), for probes. */
  readonly handedOver = new KeptCompletions(
    HANDED_OVER_LIMIT,
    HANDED_OVER_OUTPUT_CHARS,
    OUTPUT_NOT_KEPT_HANDED_OVER,
  );
  /** Attempts killed at once whose result is not in yet (key#fence): a probe hears `running`. */
  readonly killing = new Set<string>();

  /** Remembers a lease gone from the worker, and whether it started. */
  forget(l: Lease): void {
    const k = fencedKey(l.key, l.req.fence);
    this.forgotten.delete(k);
    if (this.forgotten.size >= FORGOTTEN_LIMIT) this.forgotten.delete(this.forgotten.oldest()!);
    this.forgotten.set(k, l.execution !== undefined || l.completion !== undefined);
  }

  /** Keeps a completion for probes (`givenUp`). */
  remember(k: string, c: Completion): void {
    this.givenUp.set(k, c);
  }

  /** The completion kept for a probe of `k`, if any (given up first: the later word). */
  completion(k: string): Completion | undefined {
    return this.givenUp.get(k) ?? this.handedOver.get(k);
  }
}
