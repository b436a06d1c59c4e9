/**
 * The API as the ledger chaos test uses it, and the user's commands it issues while faults are
 * active: pause (and a resume 3–12 s later), a new schedule, delete (and a new job in its place),
 * run-now. Each change is a phase of its job (test/chaos/ledger-types.ts `JobPhase`) with the
 * instants it was sent and acknowledged, which is all (c) needs to know what each occurrence
 * calls for (test/chaos/ledger-checks.ts).
 *
 * Retries: a change that sets a state (pause, resume, schedule, delete) is sent again until it is
 * acknowledged — sending it twice has the effect of once. A run-now is sent again only when it
 * never reached the API (connection refused); one that may have arrived is not repeated, and
 * counts as sent (a second manual run would be the cluster's doing, not the test's).
 */
import type { JobInfo, JobPhase } from "./ledger-types.ts";
import { delay } from "./ledger-cluster.ts";

/** One HTTP request's own deadline (the cluster answers 503 after its 15 s request deadline). */
const REQUEST_TIMEOUT_MS = 20_000;
/** How long a change is retried before it is given up as unacknowledged. */
const COMMAND_DEADLINE_MS = 120_000;

export type ApiUrl = () => string;

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number | undefined,
    readonly delivered: boolean,
  ) {
    super(message);
  }
}

/** One request. Throws ApiError: `status` undefined when no answer came, `delivered` false only when it never left. */
export async function request<T>(
  url: string,
  key: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<T> {
  let res: Response;
  try {
    res = await fetch(`${url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${key}`,
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
        ...headers,
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
  } catch (e) {
    const code = (e as { cause?: { code?: string } }).cause?.code;
    throw new ApiError(
      `${method} ${path}: ${String(e)}${code ? ` (${code})` : ""}`,
      undefined,
      code !== "ECONNREFUSED",
    );
  }
  const text = await res.text();
  if (res.status >= 400)
    throw new ApiError(`${method} ${path}: ${res.status} ${text.slice(0, 300)}`, res.status, true);
  return (text ? JSON.parse(text) : null) as T;
}

/**
 * Calls the API through whatever node serves it now, retrying while it is unavailable (no answer,
 * 5xx, 429) until `timeoutMs`; a 4xx other than 429 is thrown at once.
 */
export async function call<T>(
  apiUrl: ApiUrl,
  key: string,
  method: string,
  path: string,
  body?: unknown,
  timeoutMs = 30_000,
  headers: Record<string, string> = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  for (;;) {
    try {
      return await request<T>(apiUrl(), key, method, path, body, headers);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      if (e.status !== undefined && e.status < 500 && e.status !== 429) throw e;
      last = e.message; // the API node is restarting, or the cluster is busy: try again
    }
    if (Date.now() > deadline)
      throw new Error(`${method} ${path}: no answer within ${timeoutMs} ms (${last})`);
    await delay(200);
  }
}

export interface CommandCounts {
  pause: number;
  resume: number;
  patch: number;
  delete: number;
  run_now: number;
  /** Run-now requests that may have arrived but got no answer (their run may exist). */
  run_now_unanswered: number;
  /** Changes never acknowledged within the deadline (their job is checked only up to their send). */
  unacknowledged: number;
}

export interface CommanderDeps {
  jobs: JobInfo[];
  apiUrl: ApiUrl;
  keyOf: (tenant: string) => string;
  /** Creates a job of `tenant` in place of a deleted one (added to `jobs` by the caller). */
  replace: (tenant: string) => Promise<void>;
  rng: () => number;
  steps: number[];
  /** Commands in this order, round and round (default: drawn at random by weight). */
  order?: readonly CommandKind[];
  log: (line: string) => void;
}

export const COMMAND_KINDS = ["pause", "patch", "run_now", "delete"] as const;
export type CommandKind = (typeof COMMAND_KINDS)[number];
const KINDS = COMMAND_KINDS;
/** How often each is picked (out of the sum). */
const WEIGHTS: Record<CommandKind, number> = { pause: 3, patch: 3, run_now: 3, delete: 1 };

export class Commander {
  readonly counts: CommandCounts = {
    pause: 0,
    resume: 0,
    patch: 0,
    delete: 0,
    run_now: 0,
    run_now_unanswered: 0,
    unacknowledged: 0,
  };
  readonly #pending = new Set<Promise<void>>();
  /** Jobs with a change in flight or a resume to come, or whose state is unknown (never acknowledged). */
  readonly #busy = new Set<string>();
  #issued = 0;

  constructor(private readonly d: CommanderDeps) {}

  /** Issues one command on a job no other command is changing; resolves once it is acknowledged (a resume runs on). */
  async issue(): Promise<void> {
    const live = this.d.jobs.filter((j) => !this.#busy.has(j.jobId) && !last(j).deleted);
    if (live.length === 0) return;
    const j = live[Math.floor(this.d.rng() * live.length)]!;
    let r = this.d.rng() * Object.values(WEIGHTS).reduce((a, b) => a + b, 0);
    const kind = this.d.order
      ? this.d.order[this.#issued % this.d.order.length]!
      : (KINDS.find((k) => (r -= WEIGHTS[k]) < 0) ?? "run_now");
    this.#issued++;
    this.#busy.add(j.jobId);
    const done = this.#run(j, kind).catch((e: unknown) => {
      this.counts.unacknowledged++;
      this.d.log(`command ${kind} on ${j.jobId} broke: ${String(e)}`);
    });
    this.#pending.add(done);
    void done.finally(() => this.#pending.delete(done));
    await done;
  }

  /** Issues a command `ms` from now (counted as under way from now: `settle` waits for it). */
  issueAfter(ms: number): void {
    const later = delay(ms).then(() => this.issue());
    this.#pending.add(later);
    void later.finally(() => this.#pending.delete(later));
  }

  /** Waits for every command and resume still under way. */
  async settle(): Promise<void> {
    while (this.#pending.size > 0) await Promise.all([...this.#pending]);
  }

  async #run(j: JobInfo, kind: CommandKind): Promise<void> {
    const cur = last(j);
    switch (kind) {
      case "pause": {
        if (
          !(await this.#change(
            j,
            { change: "pause", enabled: false, step: cur.step, deleted: false },
            { enabled: false },
          ))
        )
          return;
        // The resume comes later, during whatever fault is active then; the job stays busy until it.
        const resume = delay(Math.round(3000 + this.d.rng() * 9000)).then(async () => {
          if (
            await this.#change(
              j,
              { change: "resume", enabled: true, step: cur.step, deleted: false },
              { enabled: true },
            )
          )
            this.#busy.delete(j.jobId);
        });
        this.#pending.add(resume);
        void resume.finally(() => this.#pending.delete(resume));
        return;
      }
      case "patch": {
        const steps = this.d.steps.filter((s) => s !== cur.step);
        const step = steps[Math.floor(this.d.rng() * steps.length)]!;
        if (
          await this.#change(
            j,
            { change: "patch", enabled: cur.enabled, step, deleted: false },
            { schedule: { cron: `*/${step} * * * * *`, time_zone: "UTC" } },
          )
        )
          this.#busy.delete(j.jobId);
        return;
      }
      case "delete": {
        if (
          await this.#change(
            j,
            { change: "delete", enabled: false, step: cur.step, deleted: true },
            null,
          )
        )
          await this.d.replace(j.tenant);
        return; // a deleted job stays busy: no more commands
      }
      case "run_now":
        await this.#runNow(j);
        this.#busy.delete(j.jobId);
        return;
    }
  }

  /** Sends a change until acknowledged; its phase is recorded before the first send. False: never acknowledged. */
  async #change(
    j: JobInfo,
    p: Omit<JobPhase, "sentMs" | "ackMs">,
    patch: Record<string, unknown> | null,
  ): Promise<boolean> {
    const phase: JobPhase = { ...p, sentMs: Date.now(), ackMs: undefined };
    j.phases.push(phase);
    const key = this.d.keyOf(j.tenant);
    const deadline = Date.now() + COMMAND_DEADLINE_MS;
    for (let tries = 1; ; tries++) {
      try {
        if (patch === null) await request(this.d.apiUrl(), key, "DELETE", `/v1/jobs/${j.jobId}`);
        else await request(this.d.apiUrl(), key, "PATCH", `/v1/jobs/${j.jobId}`, patch);
        phase.ackMs = Date.now();
      } catch (e) {
        if (!(e instanceof ApiError)) throw e;
        // A delete sent again after one that applied: 404, the job is gone — acknowledged.
        if (patch === null && e.status === 404 && tries > 1) phase.ackMs = Date.now();
        else if (e.status !== undefined && e.status < 500 && e.status !== 429) throw e;
      }
      if (phase.ackMs !== undefined) {
        this.counts[p.change === "create" ? "patch" : p.change]++;
        this.d.log(
          `command: ${p.change} ${j.jobId}${p.change === "patch" ? ` → */${p.step}` : ""} acknowledged after ${phase.ackMs - phase.sentMs} ms${tries > 1 ? ` (${tries} sends)` : ""}`,
        );
        return true;
      }
      if (Date.now() > deadline) {
        this.counts.unacknowledged++;
        this.d.log(
          `command: ${p.change} ${j.jobId} NOT acknowledged within ${COMMAND_DEADLINE_MS} ms`,
        );
        return false;
      }
      await delay(200);
    }
  }

  async #runNow(j: JobInfo): Promise<void> {
    const key = this.d.keyOf(j.tenant);
    const t0 = Date.now();
    for (;;) {
      try {
        const run = await request<{ run_id: string }>(
          this.d.apiUrl(),
          key,
          "POST",
          `/v1/jobs/${j.jobId}/runs`,
        );
        j.manual.sent++;
        j.manual.acked.push(run.run_id);
        this.counts.run_now++;
        this.d.log(`command: run-now ${j.jobId} → ${run.run_id} after ${Date.now() - t0} ms`);
        return;
      } catch (e) {
        if (!(e instanceof ApiError)) throw e;
        if (e.delivered) {
          // It may have arrived (no answer, 5xx): not sent again.
          j.manual.sent++;
          this.counts.run_now_unanswered++;
          this.d.log(`command: run-now ${j.jobId} unanswered: ${e.message}`);
          return;
        }
      }
      if (Date.now() - t0 > COMMAND_DEADLINE_MS) return;
      await delay(200);
    }
  }
}

export const last = (j: JobInfo): JobPhase => j.phases[j.phases.length - 1]!;
