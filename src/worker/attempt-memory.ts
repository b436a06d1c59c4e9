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

/** The characters of output a given-up completion holds (the shared OUTPUT_NOT_KEPT costs none). */
function keptChars(c: Completion): number {
  return c.output === OUTPUT_NOT_KEPT ? 0 : c.output.length;
}

export class AttemptMemory {
  /**
   * Attempts gone from here (key#fence → whether it started), for probes; bounded, oldest out
   * first.
   */
  readonly forgotten = new OrderedMap<string, boolean>();
  /** Completions of reports given up (key#fence), for probes; bounded, oldest out first. */
  readonly givenUp = new OrderedMap<string, Completion>();
  /** Characters of output the given-up completions hold (at most GIVEN_UP_OUTPUT_CHARS). */
  #givenUpChars = 0;
  /**
   * Given-up completions holding their output, oldest first (the first to lose it past the budget).
   */
  #givenUpWithOutput = new Fifo<string>();
  /** Attempts killed at once whose result is not in yet (key#fence): a probe hears `running`. */
  readonly killing = new Set<string>();

  /** Remembers a lease gone from the worker, and whether it started. */
  forget(l: Lease): void {
    const k = fencedKey(l.key, l.req.fence);
    this.forgotten.delete(k);
    if (this.forgotten.size >= FORGOTTEN_LIMIT) this.forgotten.delete(this.forgotten.oldest()!);
    this.forgotten.set(k, l.execution !== undefined || l.completion !== undefined);
  }

  /** Keeps a completion for probes (`givenUp`), within GIVEN_UP_LIMIT and GIVEN_UP_OUTPUT_CHARS. */
  remember(k: string, c: Completion): void {
    this.#forgetGivenUp(k);
    this.givenUp.set(k, c);
    this.#givenUpChars += keptChars(c);
    if (keptChars(c) > 0) this.#givenUpWithOutput.push(k);
    while (this.givenUp.size > GIVEN_UP_LIMIT) this.#forgetGivenUp(this.givenUp.oldest()!);
    // Keys of entries evicted or replaced stay in the queue until met: rebuilt once they outnumber
    // the live ones.
    if (this.#givenUpWithOutput.size > 2 * this.givenUp.size + 1024) {
      this.#givenUpWithOutput = new Fifo<string>();
      for (const [key, kept] of this.givenUp)
        if (keptChars(kept) > 0) this.#givenUpWithOutput.push(key);
    }
    while (this.#givenUpChars > GIVEN_UP_OUTPUT_CHARS && this.#givenUpWithOutput.size > 0) {
      const oldest = this.#givenUpWithOutput.shift()!;
      const kept = this.givenUp.get(oldest);
      if (!kept || keptChars(kept) === 0) continue; // gone, or kept again since without output
      this.#givenUpChars -= keptChars(kept);
      this.givenUp.set(oldest, { ...kept, output: OUTPUT_NOT_KEPT });
    }
  }

  #forgetGivenUp(k: string): void {
    const c = this.givenUp.get(k);
    if (!c) return;
    this.givenUp.delete(k);
    this.#givenUpChars -= keptChars(c);
  }
}
