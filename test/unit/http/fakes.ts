/**
 * Fakes of OUR service interfaces for route tests: an in-memory `JobsService` that honours the
 * contract (tenant scoping → not_found, If-Match → precondition_failed, idempotency replay and
 * conflict, cursor paging) and a `TenantDirectory` with fixed keys. Not fakes of NATS or KV: the
 * e2e tests run the real service over a socket.
 */
import { KairosError } from "../../../src/lib/errors.ts";
import type {
  JobListFilter,
  JobPatch,
  JobSpec,
  JobView,
  Page,
  RunStatus,
  RunView,
} from "../../../src/protocol/model.ts";
import type { JobsService, Tenant, TenantDirectory } from "../../../src/protocol/service.ts";
import type { Clock } from "../../../src/lib/clock.ts";
import { compileSchedule, formatUtc } from "../../../src/schedule/index.ts";

interface StoredJob {
  view: JobView;
}

export class FakeJobs implements JobsService {
  readonly calls: { method: string; tenantId: string; args: unknown[] }[] = [];
  #jobs = new Map<string, StoredJob>();
  #runs = new Map<string, RunView>();
  #idem = new Map<string, { body: string; jobId: string }>();
  #seq = 0;
  /** When set, every call throws it (to test error mapping). */
  failWith: Error | undefined = undefined;

  constructor(private readonly clock: Clock) {}

  #enter(method: string, tenantId: string, ...args: unknown[]): void {
    this.calls.push({ method, tenantId, args });
    if (this.failWith !== undefined) throw this.failWith;
  }

  #job(tenantId: string, jobId: string): StoredJob {
    const j = this.#jobs.get(jobId);
    if (!j || j.view.tenant_id !== tenantId)
      throw new KairosError("not_found", `job ${jobId} not found`);
    return j;
  }

  #nextRuns(spec: JobSpec, n: number): string[] {
    return compileSchedule(spec.schedule).next(this.clock.now(), n).map(formatUtc);
  }

  async createJob(
    tenantId: string,
    spec: JobSpec,
    idempotencyKey?: string,
  ): Promise<{ job: JobView; created: boolean }> {
    this.#enter("createJob", tenantId, spec, idempotencyKey);
    const body = JSON.stringify(spec);
    if (idempotencyKey !== undefined) {
      const prior = this.#idem.get(`${tenantId}/${idempotencyKey}`);
      if (prior) {
        if (prior.body !== body)
          throw new KairosError("conflict", "Idempotency-Key was used with a different body", {
            field: "Idempotency-Key",
          });
        return { job: this.#job(tenantId, prior.jobId).view, created: false };
      }
    }
    const now = formatUtc(this.clock.now());
    const jobId = `job${String(++this.#seq).padStart(6, "0")}`;
    const view: JobView = {
      ...spec,
      job_id: jobId,
      tenant_id: tenantId,
      version: 1,
      created_at: now,
      updated_at: now,
      next_run_at: spec.enabled ? (this.#nextRuns(spec, 1)[0] ?? null) : null,
    };
    this.#jobs.set(jobId, { view });
    if (idempotencyKey !== undefined)
      this.#idem.set(`${tenantId}/${idempotencyKey}`, { body, jobId });
    return { job: view, created: true };
  }

  async listJobs(
    tenantId: string,
    opts: { cursor?: string; limit: number } & JobListFilter,
  ): Promise<Page<JobView>> {
    this.#enter("listJobs", tenantId, opts);
    if (opts.cursor !== undefined && !/^job\d{6}$/.test(opts.cursor))
      throw new KairosError("invalid_argument", "cursor: not a cursor from this API", {
        field: "cursor",
      });
    const all = [...this.#jobs.values()]
      .map((j) => j.view)
      .filter(
        (v) =>
          v.tenant_id === tenantId &&
          (opts.cursor === undefined || v.job_id > opts.cursor) &&
          (opts.name === undefined ||
            (v.name ?? "").toLowerCase().includes(opts.name.toLowerCase())) &&
          (opts.state === undefined || v.enabled === (opts.state === "enabled")),
      );
    all.sort((a, b) => a.job_id.localeCompare(b.job_id));
    const items = all.slice(0, opts.limit);
    return { items, next_cursor: all.length > opts.limit ? (items.at(-1)?.job_id ?? null) : null };
  }

  async getJob(tenantId: string, jobId: string): Promise<JobView> {
    this.#enter("getJob", tenantId, jobId);
    const j = this.#job(tenantId, jobId);
    return { ...j.view, next_runs: j.view.enabled ? this.#nextRuns(j.view, 5) : [] };
  }

  async patchJob(
    tenantId: string,
    jobId: string,
    patch: JobPatch,
    ifMatch?: number,
  ): Promise<JobView> {
    this.#enter("patchJob", tenantId, jobId, patch, ifMatch);
    const j = this.#job(tenantId, jobId);
    if (ifMatch !== undefined && ifMatch !== j.view.version) {
      throw new KairosError(
        "precondition_failed",
        `If-Match: job is at version ${j.view.version}, not ${ifMatch}`,
        { field: "If-Match" },
      );
    }
    j.view = {
      ...j.view,
      ...patch,
      version: j.view.version + 1,
      updated_at: formatUtc(this.clock.now()),
    };
    return j.view;
  }

  async deleteJob(tenantId: string, jobId: string): Promise<void> {
    this.#enter("deleteJob", tenantId, jobId);
    this.#job(tenantId, jobId);
    this.#jobs.delete(jobId);
  }

  async runNow(tenantId: string, jobId: string): Promise<RunView> {
    this.#enter("runNow", tenantId, jobId);
    this.#job(tenantId, jobId);
    const now = formatUtc(this.clock.now());
    const run: RunView = {
      run_id: `run${String(++this.#seq).padStart(6, "0")}`,
      job_id: jobId,
      tenant_id: tenantId,
      scheduled_for: now,
      trigger: "manual",
      status: "queued",
      attempt: 0,
      attempts: [],
      created_at: now,
      started_at: null,
      finished_at: null,
      next_attempt_at: null,
      result: null,
      reason: null,
    };
    this.#runs.set(run.run_id, run);
    return run;
  }

  async listRuns(
    tenantId: string,
    jobId: string,
    opts: { status?: RunStatus; cursor?: string; limit: number },
  ): Promise<Page<RunView>> {
    this.#enter("listRuns", tenantId, jobId, opts);
    this.#job(tenantId, jobId);
    const all = [...this.#runs.values()]
      .filter(
        (r) =>
          r.job_id === jobId &&
          (opts.status === undefined || r.status === opts.status) &&
          (opts.cursor === undefined || r.run_id < opts.cursor),
      )
      .sort((a, b) => b.run_id.localeCompare(a.run_id));
    const items = all.slice(0, opts.limit);
    return { items, next_cursor: all.length > opts.limit ? (items.at(-1)?.run_id ?? null) : null };
  }

  async listTenantRuns(
    tenantId: string,
    opts: { status?: RunStatus; cursor?: string; limit: number },
  ): Promise<Page<RunView>> {
    this.#enter("listTenantRuns", tenantId, opts);
    const all = [...this.#runs.values()]
      .filter(
        (r) =>
          r.tenant_id === tenantId &&
          (opts.status === undefined || r.status === opts.status) &&
          (opts.cursor === undefined || r.run_id < opts.cursor),
      )
      .sort((a, b) => b.run_id.localeCompare(a.run_id));
    const items = all.slice(0, opts.limit);
    return { items, next_cursor: all.length > opts.limit ? (items.at(-1)?.run_id ?? null) : null };
  }

  async listDeadLetters(
    tenantId: string,
    opts: { cursor?: string; limit: number },
  ): Promise<Page<RunView>> {
    this.#enter("listDeadLetters", tenantId, opts);
    const all = [...this.#runs.values()]
      .filter(
        (r) =>
          r.tenant_id === tenantId &&
          (r.status === "failed" || r.status === "timed_out") &&
          (opts.cursor === undefined || r.run_id > opts.cursor),
      )
      .sort((a, b) => a.run_id.localeCompare(b.run_id));
    const items = all.slice(0, opts.limit);
    return { items, next_cursor: all.length > opts.limit ? (items.at(-1)?.run_id ?? null) : null };
  }

  async getRun(tenantId: string, runId: string): Promise<RunView> {
    this.#enter("getRun", tenantId, runId);
    const r = this.#runs.get(runId);
    if (!r || r.tenant_id !== tenantId)
      throw new KairosError("not_found", `run ${runId} not found`);
    return r;
  }

  async cancelRun(tenantId: string, runId: string, by: string, note?: string): Promise<RunView> {
    this.#enter("cancelRun", tenantId, runId, by, note);
    const r = this.#runs.get(runId);
    if (!r || r.tenant_id !== tenantId)
      throw new KairosError("not_found", `run ${runId} not found`);
    if (r.status === "cancelled") return r;
    if (r.finished_at !== null)
      throw new KairosError("conflict", `run ${runId} already ended ${r.status}`, {
        retryable: false,
      });
    const done: RunView = {
      ...r,
      status: "cancelled",
      finished_at: formatUtc(this.clock.now()),
      reason: `cancelled by request of ${by}${note === undefined ? "" : `: ${note}`}`,
    };
    this.#runs.set(runId, done);
    return done;
  }

  /** Ends a run as the scheduler would (for tests of a cancel after the end). */
  endRun(runId: string, status: RunView["status"]): void {
    const r = this.#runs.get(runId);
    if (r) this.#runs.set(runId, { ...r, status, finished_at: formatUtc(this.clock.now()) });
  }
}

/** Two tenants with one fixed key each, plus a revoked key. */
export class FakeTenants implements TenantDirectory {
  static readonly KEY_A = "kai_tenant_a_key";
  static readonly KEY_B = "kai_tenant_b_key";
  static readonly REVOKED = "kai_revoked_key";
  #tenants = new Map<string, Tenant>([
    [FakeTenants.KEY_A, tenant("ta", "alpha")],
    [FakeTenants.KEY_B, tenant("tb", "beta")],
  ]);
  async authenticate(apiKey: string): Promise<Tenant | null> {
    return this.#tenants.get(apiKey) ?? null;
  }
  /** Through `authenticate`, so a subclass's override of it applies; key ids `k-<tenant id>`. */
  async authenticateKey(apiKey: string): Promise<{ tenant: Tenant; keyId: string } | null> {
    const tenant = await this.authenticate(apiKey);
    return tenant === null ? null : { tenant, keyId: `k-${tenant.tenant_id}` };
  }
  async createTenant(): Promise<never> {
    throw new KairosError("unsupported", "fake");
  }
  async createKey(): Promise<never> {
    throw new KairosError("unsupported", "fake");
  }
  async revokeKey(): Promise<void> {}
  async setWebhook(): Promise<never> {
    throw new KairosError("unsupported", "fake");
  }
  async getTenant(id: string): Promise<Tenant | null> {
    return [...this.#tenants.values()].find((t) => t.tenant_id === id) ?? null;
  }
  async findTenantByName(name: string): Promise<Tenant | null> {
    return [...this.#tenants.values()].find((t) => t.name === name) ?? null;
  }
}

function tenant(id: string, name: string): Tenant {
  return {
    tenant_id: id,
    name,
    created_at: "2026-01-01T00:00:00Z",
    max_concurrent_runs: 100,
    max_jobs: 10000,
    weight: 1,
    webhook_url: null,
  };
}
