/**
 * Faults a simulation injects into the job actor to show that its invariants catch them: each
 * switches off one defence. Only tests pass them (test/sim/cluster.ts); production passes none,
 * and they are no part of the job actor's configuration.
 */
export interface JobFaults {
  /**
   * One fence is offered to up to three workers, and heartbeats and completions are accepted by
   * fence alone: a double execution the simulation's invariant (a) must catch.
   */
  readonly fenceSharedByWorkers?: boolean;
  /**
   * A silent lease lapses without a probe of its worker (an attempt never heard to start is
   * presumed unstarted): a re-execution the simulation's invariant (h) must catch.
   */
  readonly lapseWithoutProbe?: boolean;
}

/** No fault: what production runs. */
export const NO_FAULTS: JobFaults = Object.freeze({});
