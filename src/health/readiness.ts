/**
 * Readiness: whether this node can do its job right now, for `/readyz` (src/http/ops.ts) and
 * the orchestrator's checks (Nomad). Liveness (`/healthz`) is only "the process serves HTTP".
 *
 * A node is ready when every check of its roles passes:
 * - `nats` (every role): the connection answers a PING within the check's budget;
 * - `partitions` (scheduler): placement is settled for this node — every partition that rendezvous
 *   hashing over the live schedulers assigns here is held (a node that placement gives nothing is
 *   settled too);
 * - `executor` (worker): the executor answers (the Docker engine pings; process/noop always do).
 *
 * Each check has a time budget: one that does not answer in time fails with "no answer within
 * N ms" (a NATS outage makes the flush hang until reconnection). Checks run in parallel, so a
 * probe costs at most one budget.
 */
import type { Clock } from "../lib/clock.ts";

export interface CheckResult {
  ok: boolean;
  detail: string;
}

export interface ReadinessCheck {
  readonly name: string;
  run(): Promise<CheckResult>;
}

export interface Readiness {
  ready: boolean;
  checks: Record<string, CheckResult>;
}

export const CHECK_BUDGET_MS = 2000;

function withBudget(c: ReadinessCheck, budgetMs: number, clock: Clock): Promise<CheckResult> {
  return new Promise((resolve) => {
    const cancel = clock.setTimer(budgetMs, () =>
      resolve({ ok: false, detail: `no answer within ${budgetMs} ms` }),
    );
    c.run().then(
      (r) => {
        cancel();
        resolve(r);
      },
      (e: unknown) => {
        cancel();
        resolve({ ok: false, detail: e instanceof Error ? e.message : String(e) });
      },
    );
  });
}

/** Runs every check (in parallel, each within `budgetMs` on `clock`); ready when all pass. */
export async function checkReadiness(
  checks: readonly ReadinessCheck[],
  clock: Clock,
  budgetMs = CHECK_BUDGET_MS,
): Promise<Readiness> {
  const results = await Promise.all(
    checks.map(async (c) => [c.name, await withBudget(c, budgetMs, clock)] as const),
  );
  return { ready: results.every(([, r]) => r.ok), checks: Object.fromEntries(results) };
}

/** `nats`: the bus answers a flush (a PING/PONG round trip on a real connection). */
export function natsCheck(
  bus: () => { flush(): Promise<void>; isClosed(): boolean },
): ReadinessCheck {
  return {
    name: "nats",
    async run() {
      const b = bus();
      if (b.isClosed()) return { ok: false, detail: "connection closed" };
      await b.flush();
      return { ok: true, detail: "connected" };
    },
  };
}

/**
 * `partitions`: the partitions placement assigns to `nodeId` (`desired[p] === nodeId`) are all
 * held. `desired` and `held` are read at check time.
 */
export function partitionsCheck(
  nodeId: string,
  desired: () => readonly (string | undefined)[],
  held: () => readonly number[],
): ReadinessCheck {
  return {
    name: "partitions",
    async run() {
      const want = desired().flatMap((owner, p) => (owner === nodeId ? [p] : []));
      const have = new Set(held());
      const missing = want.filter((p) => !have.has(p));
      if (missing.length > 0) {
        const list = missing.slice(0, 10).join(",") + (missing.length > 10 ? ",…" : "");
        return {
          ok: false,
          detail: `holding ${have.size}; placement assigns ${want.length} here, not yet held: ${list}`,
        };
      }
      return { ok: true, detail: `holding ${have.size} (placement assigns ${want.length} here)` };
    },
  };
}

/** `executor`: the sandbox executor answers (see src/sandbox/probe.ts). */
export function executorCheck(probe: () => Promise<string>): ReadinessCheck {
  return {
    name: "executor",
    async run() {
      return { ok: true, detail: await probe() };
    },
  };
}
