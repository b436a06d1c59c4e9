/**
 * `JobsService` over the cluster: commands go to job actors through the router (serialised with
 * the schedule and the runs); lists come from KV. Idempotency keys are KV records
 * `<tenant>.<sha256(key)>` → `{job_id, request_hash}` (24 h TTL): the job id is fixed before the
 * actor is asked, so a retried create, even after a crash, reaches the same actor and gets the
 * job it made. `max_jobs` is counted by `TenantJobCounter` (job-quota.ts).
 *
 * Runs are read by run-reads.ts (a job's runs index, O(page) whatever the history). A jobs
 * page reads the tenant's job catalog (src/catalog/, jobs-page.ts): a chunk or two and the page's
 * job states, never the job actors. The catalog is written before the job actor on a create (a
 * created job is always listed; an entry whose job never came is skipped, and dropped later) and
 * after it on a delete (an entry of a deleted job is skipped and dropped by the page that meets
 * it); a patch of the name or state marks the entry before and settles it after. A new job's id
 * begins with its creation time (`newTimedJobId`), so a tenant's creates meet at the end of its
 * catalog and are written a group at a time; a new id that is another job's is tried again.
 * A batch's creates (`createJobs`) go through the same steps together: their counts and entries
 * grouped, their actor creates sent one request per partition.
 */
import { KairosError, isKairosError } from "../lib/errors.ts";
import type { Random } from "../lib/random.ts";
import type { Buckets } from "../cluster/buckets.ts";
import { decode, encode } from "../cluster/codec.ts";
import { MAX_BATCH, type ActorRouter, type ItemResult } from "../cluster/router.ts";
import { partitionOf } from "../cluster/placement.ts";
import { InFlightLimiter } from "../cluster/in-flight.ts";
import { TenantJobCounter } from "../slots/job-quota.ts";
import { JobLists } from "../catalog/job-lists.ts";
import type { CatalogEntry } from "../catalog/catalog-core.ts";
import { jobsPage } from "./jobs-page.ts";
import { RunReads } from "./run-reads.ts";
import { JOB_ACTOR, isValidId, jobActorId, newJobId, newTimedJobId } from "../protocol/ids.ts";
import type { JobReply } from "../job-state/job-types.ts";
import type { JobState } from "../job-state/job-state.ts";
import {
  publicJob,
  purgeSecretEnv,
  secretKeyPrefix,
  type SealedEnvRef,
  type SecretEnvStore,
} from "../secrets/secret-env.ts";
import {
  type JobListFilter,
  type JobPatch,
  type JobSpec,
  type JobView,
  type Page,
  type RunStatus,
  type RunView,
} from "../protocol/model.ts";
import type { CreateOutcome, JobsService } from "../protocol/service.ts";
import type { LiveRunSource } from "../protocol/live-runs.ts";
import { canonical, sha256 } from "./request-hash.ts";

/** How many ids a create tries when a new one is another job's (`newTimedJobId`). */
export const CREATE_ID_TRIES = 3;

/** Creates of a batch begun together (`createJobs`). */
export const CREATE_WAVE = 256;
/** Waves of batch creates in flight on a node, whatever the batches (`createJobs`). */
export const CREATE_WAVES_IN_FLIGHT = 4;
/** Most creates of one group request to a partition's owner (`createJobs`). */
export const CREATE_GROUP_ITEMS = MAX_BATCH;
/** About the most bytes of job specs in one group request (NATS's max_payload is 1 MiB). */
export const CREATE_GROUP_BYTES = 256 * 1024;
/**
 * How long a group's creates may wait at the owner before those not done are answered pending
 * (and sent again one by one): job activations queue behind the node's KV operations.
 */
export const CREATE_GROUP_BUDGET_MS = 5_000;

/** A create that is counted, listed and has its id, before its actor is asked (`#begin`). */
interface Begun {
  readonly tenantId: string;
  readonly spec: JobSpec;
  readonly jobId: string;
  /** False: an idempotent replay (the key's earlier job id). */
  readonly created: boolean;
  /** Counted in the tenant's `max_jobs` by this create. */
  readonly counted: boolean;
  readonly requestHash: string;
  /** The length of the spec's canonical JSON (the size of its create message, near enough). */
  readonly size: number;
  readonly secrets: SecretEnvStore | undefined;
  readonly idem: { key: string; revision: number } | undefined;
}

/** How many times a run-now is sent when its owner answers an unknown outcome (a KV timeout). */
export const RUN_NOW_TRIES = 3;

/** A job state as a catalog entry (a tenant's first list builds its catalog from them). */
const entryOf = (s: JobState): CatalogEntry => ({
  i: s.job!.job_id,
  n: s.job!.spec.name,
  e: s.job!.spec.enabled,
  v: s.job!.version,
  t: s.job!.created_at_ms,
});

export class NatsJobsService implements JobsService {
  readonly #quota: TenantJobCounter;
  /** The tenants' job catalogs and paused indexes. */
  readonly #lists: JobLists;
  readonly #runs: RunReads;
  /** Batch creates' waves in flight (`createJobs`). */
  readonly #waves = new InFlightLimiter(CREATE_WAVES_IN_FLIGHT);

  constructor(
    private readonly router: ActorRouter,
    private readonly buckets: Buckets,
    private readonly partitions: number,
    private readonly random: Random,
    /** Seals `task.secret_env` (needs the cluster secret key); none: secrets are refused. */
    private readonly secrets?: SecretEnvStore,
    /** Live views of runs not ended for the tenant's runs list; none: records as written. */
    liveRuns?: LiveRunSource,
  ) {
    this.#quota = new TenantJobCounter(
      buckets.tenants,
      async (tenantId) => (await this.#liveJobs(tenantId)).length,
      { clock: router.clock, random },
    );
    this.#runs = new RunReads(router, buckets, partitions, (t, j) => this.#job(t, j), liveRuns);
    this.#lists = new JobLists({
      kv: buckets.tenants,
      clock: router.clock,
      random,
      existing: async (tenantId) => (await this.#liveJobs(tenantId)).map(entryOf),
    });
  }

  /** Every live job state of a tenant (a list of its job actors' state). */
  async #liveJobs(tenantId: string): Promise<JobState[]> {
    const entries = await this.buckets.actors.list(`${JOB_ACTOR}.*.${tenantId}.*`);
    return entries
      .map((e) => decode<{ s: JobState }>(e.value).s)
      .filter((s) => s.job && !s.deleted && s.job.tenant_id === tenantId);
  }

  #job(tenantId: string, jobId: string) {
    if (!isValidId(jobId)) throw new KairosError("not_found", "job not found");
    return { type: JOB_ACTOR, id: jobActorId(tenantId, jobId) };
  }

  /** The task's secrets: the store that seals them, or a 400 when this node has no key. */
  #secretStore(
    task: { secret_env?: Record<string, string> } | undefined,
  ): SecretEnvStore | undefined {
    if (task?.secret_env === undefined || Object.keys(task.secret_env).length === 0)
      return undefined;
    if (!this.secrets)
      throw new KairosError(
        "invalid_argument",
        "task.secret_env: this cluster has no secret key configured (--secret-key-file), so it cannot store secrets",
        { field: "task.secret_env" },
      );
    return this.secrets;
  }

  /** The task as stored: secrets replaced by the reference to their sealed version. */
  static #sealedTask<T extends JobSpec["task"]>(task: T, sealed: SealedEnvRef | undefined): T {
    const { secret_env: _plain, sealed_env: _old, ...rest } = task;
    return (sealed ? { ...rest, sealed_env: sealed } : rest) as T;
  }

  async createJob(
    tenantId: string,
    spec: JobSpec,
    idempotencyKey?: string,
  ): Promise<{ job: JobView; created: boolean }> {
    for (let tries = 1; ; tries++) {
      const r = await this.#create(tenantId, spec, idempotencyKey);
      if (r !== "id_taken") return r;
      if (tries >= CREATE_ID_TRIES)
        throw new KairosError("unavailable", "could not find a free job id; retry");
    }
  }

  /**
   * The job id a create uses: the new one, unless the idempotency key was used before (its job's,
   * `created` false). A new key is claimed for the new id (`idem`, to forget it if the create
   * comes to nothing); a key in flight or used with another body is a `conflict`.
   */
  async #claim(
    tenantId: string,
    newId: string,
    requestHash: string,
    idempotencyKey: string | undefined,
  ): Promise<{ jobId: string; created: boolean; idem?: { key: string; revision: number } }> {
    if (idempotencyKey === undefined) return { jobId: newId, created: true };
    const key = `${tenantId}.${sha256(idempotencyKey)}`;
    const r = await this.buckets.idempotency.create(
      key,
      encode({ job_id: newId, request_hash: requestHash }),
    );
    if (r.ok) return { jobId: newId, created: true, idem: { key, revision: r.revision } };
    const e = await this.buckets.idempotency.get(key);
    const prior = e ? decode<{ job_id: string; request_hash: string }>(e.value) : null;
    if (!prior)
      throw new KairosError(
        "conflict",
        "Idempotency-Key: a request with this key is in flight; retry",
        {
          field: "Idempotency-Key",
        },
      );
    if (prior.request_hash !== requestHash)
      throw new KairosError(
        "conflict",
        "Idempotency-Key: already used with a different request body",
        {
          field: "Idempotency-Key",
        },
      );
    return { jobId: prior.job_id, created: false };
  }

  /**
   * One try of a create; "id_taken" when the new id is another job's (`newTimedJobId`): nothing
   * of this try is left (its count, key and sealed secrets are undone, the other job's entry
   * stays), so the caller tries another id.
   */
  async #create(
    tenantId: string,
    spec: JobSpec,
    idempotencyKey: string | undefined,
  ): Promise<{ job: JobView; created: boolean } | "id_taken"> {
    return this.#finish(await this.#begin(tenantId, spec, idempotencyKey));
  }

  /**
   * A create up to its actor: the request hashed, the id claimed (or the key's earlier one),
   * counted and listed. Throws what refuses it, with nothing of it left behind.
   */
  async #begin(
    tenantId: string,
    spec: JobSpec,
    idempotencyKey: string | undefined,
  ): Promise<Begun> {
    const secrets = this.#secretStore(spec.task);
    // Hashed for idempotency with a keyed digest in place of the secret values (the hash is stored).
    const text = canonical(
      secrets
        ? { ...spec, task: { ...spec.task, secret_env: secrets.digest(spec.task.secret_env!) } }
        : spec,
    );
    const requestHash = sha256(text);
    const claim = await this.#claim(
      tenantId,
      newTimedJobId(this.router.now(), () => this.random.next()),
      requestHash,
      idempotencyKey,
    );
    const { jobId, created, idem } = claim;
    // Only a fresh job id is counted: a replay was counted by the create it replays.
    let counted = false;
    if (created) {
      try {
        counted = await this.#quota.reserve(tenantId);
      } catch (e) {
        // Forget the key, so a retry after the quota was raised or a job deleted is a new create
        // (checked again) rather than a replay of a create that never happened.
        if (idem)
          await this.buckets.idempotency.delete(idem.key, idem.revision).catch(() => undefined);
        throw e;
      }
    }
    await this.#listNew(tenantId, jobId, spec, counted);
    return {
      tenantId,
      spec,
      jobId,
      created,
      counted,
      requestHash,
      size: text.length,
      secrets,
      idem,
    };
  }

  /** The actor's create message of a begun create (its spec as stored: secrets sealed). */
  static #createMsg(b: Begun, sealed: SealedEnvRef | undefined) {
    const spec = sealed
      ? { ...b.spec, task: NatsJobsService.#sealedTask(b.spec.task, sealed) }
      : b.spec;
    return {
      kind: "create",
      tenant_id: b.tenantId,
      job_id: b.jobId,
      spec,
      request_hash: b.requestHash,
      fresh: b.created,
    };
  }

  /**
   * A begun create's actor request and its outcome. `first`: the actor's answer to this same
   * message sent already (a batch's, `createJobs`); taken when it made or found the job,
   * otherwise the message is sent again here — the actor answers a repeated create as the first
   * (same request hash) — so every refusal is handled, and reported, as a single create's.
   */
  async #finish(
    b: Begun,
    first?: ItemResult,
  ): Promise<{ job: JobView; created: boolean } | "id_taken"> {
    const { tenantId, jobId, created, counted, secrets, idem } = b;
    let reply: JobReply | null;
    let sealed: SealedEnvRef | undefined;
    try {
      sealed = secrets ? await secrets.seal(tenantId, jobId, b.spec.task.secret_env!) : undefined;
      reply =
        first?.ok === true
          ? (first.v as JobReply | null)
          : await this.router.request<JobReply>(
              this.#job(tenantId, jobId),
              NatsJobsService.#createMsg(b, sealed),
            );
    } catch (e) {
      // A new id that is another job's (the actor's `conflict` to a create that is no replay):
      // that job and its entry stay; this try is undone and another id tried.
      const taken = created && isKairosError(e, "conflict");
      // A definite refusal (e.g. invalid_schedule) made no job: uncount it. After a timeout the
      // job may exist, so the reservation stays (an over-count, never an under-count).
      if (taken) {
        if (counted) await this.#quota.release(tenantId).catch(() => undefined);
        if (idem)
          await this.buckets.idempotency.delete(idem.key, idem.revision).catch(() => undefined);
      } else if (e instanceof KairosError && !e.retryable)
        await this.#unmake(tenantId, jobId, counted);
      if (sealed && e instanceof KairosError && !e.retryable)
        await purgeSecretEnv(this.buckets.tenants, tenantId, jobId, { only: sealed.ref }).catch(
          () => undefined,
        );
      if (taken) return "id_taken";
      throw e;
    }
    const job = reply!.job!;
    // A replayed create answers with the job made first: the version sealed now is not its.
    if (sealed && job.task.sealed_env?.ref !== sealed.ref)
      await purgeSecretEnv(this.buckets.tenants, tenantId, jobId, { only: sealed.ref }).catch(
        () => undefined,
      );
    return { job: publicJob(job), created };
  }

  /**
   * Several creates of one tenant, each with its own outcome (in order), as `createJob` would
   * give it, a wave of CREATE_WAVE at a time (at most CREATE_WAVES_IN_FLIGHT waves on a node,
   * whatever the batches: thousands of activations at once ran the node's KV operations into
   * their timeouts). A wave's creates are begun together, so their quota reservations and catalog
   * entries are written a group at a time (job-quota.ts, job-catalog.ts), and their actor creates
   * go out as one request per partition (`#sendCreates`). A create with secrets, or one the
   * group's request did not settle, is finished on its own.
   */
  async createJobs(
    tenantId: string,
    items: readonly { spec: JobSpec; idempotencyKey?: string }[],
  ): Promise<CreateOutcome[]> {
    const out: CreateOutcome[] = [];
    for (let i = 0; i < items.length; i += CREATE_WAVE) {
      const wave = items.slice(i, i + CREATE_WAVE);
      out.push(...(await this.#waves.run(() => this.#createWave(tenantId, wave))));
    }
    return out;
  }

  async #createWave(
    tenantId: string,
    items: readonly { spec: JobSpec; idempotencyKey?: string }[],
  ): Promise<CreateOutcome[]> {
    const begun = await Promise.allSettled(
      items.map((it) => this.#begin(tenantId, it.spec, it.idempotencyKey)),
    );
    const grouped: { b: Begun; index: number }[] = [];
    begun.forEach((r, index) => {
      if (r.status === "fulfilled" && r.value.secrets === undefined)
        grouped.push({ b: r.value, index });
    });
    // Failed whole (it should not: a group's failure is its items'), every create goes on its own.
    const firsts = await this.#sendCreates(tenantId, grouped).catch(
      () => new Map<number, ItemResult>(),
    );
    return Promise.all(
      begun.map(async (r, index): Promise<CreateOutcome> => {
        if (r.status === "rejected") return { ok: false, error: r.reason };
        try {
          const out = await this.#finish(r.value, firsts.get(index));
          if (out !== "id_taken") return { ok: true, ...out };
          // Its new id was another job's: the whole create again, on its own.
          const { spec, idempotencyKey } = items[index]!;
          return { ok: true, ...(await this.createJob(tenantId, spec, idempotencyKey)) };
        } catch (e) {
          return { ok: false, error: e };
        }
      }),
    );
  }

  /**
   * The actor creates of begun creates, one request per partition and group (at most
   * CREATE_GROUP_ITEMS creates and about CREATE_GROUP_BYTES of specs each, well under NATS's
   * max_payload); each create's answer by its index. A group that found no owner answers
   * `no_owner` for its creates, which are then sent one by one.
   */
  async #sendCreates(
    tenantId: string,
    begun: readonly { b: Begun; index: number }[],
  ): Promise<Map<number, ItemResult>> {
    const groups: { b: Begun; index: number }[][] = [];
    const open = new Map<number, { items: { b: Begun; index: number }[]; bytes: number }>();
    for (const it of begun) {
      const p = partitionOf(this.#job(tenantId, it.b.jobId), this.partitions);
      let g = open.get(p);
      if (g && (g.items.length >= CREATE_GROUP_ITEMS || g.bytes + it.b.size > CREATE_GROUP_BYTES))
        g = undefined;
      if (g === undefined) {
        g = { items: [], bytes: 0 };
        open.set(p, g);
        groups.push(g.items);
      }
      g.items.push(it);
      g.bytes += it.b.size;
    }
    const out = new Map<number, ItemResult>();
    await Promise.all(
      groups.map(async (g) => {
        const answers = await this.router.requestMany(
          g.map((it) => ({
            to: this.#job(tenantId, it.b.jobId),
            msg: NatsJobsService.#createMsg(it.b, undefined),
          })),
          { budgetMs: CREATE_GROUP_BUDGET_MS },
        );
        g.forEach((it, k) => out.set(it.index, answers[k]!));
      }),
    );
    return out;
  }

  /**
   * Lists a job before it exists (a replay too: its first try may have stopped short of this), so
   * a job the actor made is never missing from the list. Failed, the actor was never asked: its
   * place in the quota is given back.
   */
  async #listNew(tenantId: string, jobId: string, spec: JobSpec, counted: boolean): Promise<void> {
    try {
      await this.#lists.listNew(tenantId, {
        i: jobId,
        n: spec.name,
        e: spec.enabled,
        v: 1,
        t: this.router.now(),
      });
    } catch (e) {
      if (counted) await this.#quota.release(tenantId).catch(() => undefined);
      throw e;
    }
  }

  /** Removes a job's entry (a best effort: a page drops an entry whose job is gone). */
  async #unlist(tenantId: string, jobId: string): Promise<void> {
    await this.#lists.unlist(tenantId, jobId).catch(() => undefined);
  }

  /** A create refused for sure made no job: its place in the quota and its entry go. */
  async #unmake(tenantId: string, jobId: string, counted: boolean): Promise<void> {
    if (counted) await this.#quota.release(tenantId).catch(() => undefined);
    await this.#unlist(tenantId, jobId);
  }

  async listJobs(
    tenantId: string,
    opts: { cursor?: string; limit: number } & JobListFilter,
  ): Promise<Page<JobView>> {
    return jobsPage(
      {
        lists: this.#lists,
        actors: this.buckets.actors,
        partitions: this.partitions,
        nowMs: this.router.now(),
      },
      tenantId,
      opts,
    );
  }

  async getJob(tenantId: string, jobId: string): Promise<JobView> {
    return publicJob(
      (await this.router.request<JobReply>(this.#job(tenantId, jobId), { kind: "get" }))!.job!,
    );
  }

  async patchJob(
    tenantId: string,
    jobId: string,
    patch: JobPatch,
    ifMatch?: number,
  ): Promise<JobView> {
    // A request id, so the router's retry of a patch whose reply was lost is answered with its
    // first result, not 412 (If-Match) or a second application.
    const request_id = this.#requestId();
    // A new task replaces the secrets too: a new sealed version, or none.
    const secrets = patch.task ? this.#secretStore(patch.task) : undefined;
    this.#job(tenantId, jobId);
    // The versions stored before this patch: once it applied, all but the one the job uses go.
    // (Not versions sealed meanwhile by a concurrent patch, which may yet apply after this one.)
    const prefix = secretKeyPrefix(tenantId, jobId);
    const earlier = patch.task
      ? (await this.buckets.tenants.list(`${prefix}.*`)).map((e) => e.key)
      : [];
    const sealed = secrets
      ? await secrets.seal(tenantId, jobId, patch.task!.secret_env!)
      : undefined;
    const stored = patch.task
      ? { ...patch, task: NatsJobsService.#sealedTask(patch.task, sealed) }
      : patch;
    const msg =
      ifMatch === undefined
        ? { kind: "patch", patch: stored, request_id }
        : { kind: "patch", patch: stored, if_match: ifMatch, request_id };
    // A new name or state is marked on the job's entry first: a filter finds it either way while
    // the patch is in flight, and after a crash (a page checks the job itself).
    const listed = patch.name !== undefined || patch.enabled !== undefined;
    if (listed)
      await this.#lists.beforePatch(tenantId, jobId, {
        ...(patch.name !== undefined ? { n: patch.name } : {}),
        ...(patch.enabled !== undefined ? { e: patch.enabled } : {}),
      });
    let job: JobView;
    try {
      job = (await this.router.request<JobReply>(this.#job(tenantId, jobId), msg))!.job!;
    } catch (e) {
      if (sealed && e instanceof KairosError && !e.retryable)
        await purgeSecretEnv(this.buckets.tenants, tenantId, jobId, { only: sealed.ref }).catch(
          () => undefined,
        );
      throw e;
    }
    if (listed)
      await this.#lists
        .afterPatch(tenantId, jobId, { n: job.name, e: job.enabled }, job.version)
        .catch(() => undefined); // the entry keeps both values until a page settles it
    const current = job.task.sealed_env ? `${prefix}.${job.task.sealed_env.ref}` : undefined;
    for (const key of earlier)
      if (key !== current) await this.buckets.tenants.delete(key).catch(() => undefined);
    return publicJob(job);
  }

  async deleteJob(tenantId: string, jobId: string): Promise<void> {
    const job = this.#job(tenantId, jobId); // a valid id: the purge below stays within this job
    try {
      await this.router.request(job, { kind: "delete" });
    } catch (e) {
      // Already deleted (a retry of a delete whose purge failed): purge its secrets anyway.
      if (e instanceof KairosError && e.code === "not_found") {
        await purgeSecretEnv(this.buckets.tenants, tenantId, jobId);
        await this.#unlist(tenantId, jobId);
      }
      throw e;
    }
    // Unlisted after the job is gone: if this fails (or the node dies first), the entry is one a
    // page skips and drops.
    await this.#unlist(tenantId, jobId);
    // Its secrets go with it, now (secret-env.ts); if this fails the delete fails, and a retry
    // (404, above) purges them.
    await purgeSecretEnv(this.buckets.tenants, tenantId, jobId);
    // The job is gone: uncount it. A failure here leaves an over-count (stricter, never exceeded).
    await this.#quota.release(tenantId).catch(() => undefined);
  }

  async runNow(tenantId: string, jobId: string): Promise<RunView> {
    // The router retries on timeouts; the request id makes a retry answer with the first run, and
    // the time of the first send names the run (job-commands.ts `runNow`). An unknown outcome
    // answered by the owner (a KV write that timed out, the store unreachable) is sent again the
    // same way, a few times. Given up, nothing is left half-made: the run's record follows its
    // state write (`create_run`), and a state that landed unseen is read back and its run goes on.
    const msg = {
      kind: "run_now",
      request_id: this.#requestId(),
      requested_at_ms: this.router.now(),
    };
    let reply: JobReply;
    for (let tries = 1; ; tries++) {
      try {
        reply = (await this.router.request<JobReply>(this.#job(tenantId, jobId), msg))!;
        break;
      } catch (e) {
        if (
          tries >= RUN_NOW_TRIES ||
          !(e instanceof KairosError && (e.code === "timeout" || e.code === "unavailable"))
        )
          throw e;
      }
    }
    return reply.run ?? (await this.getRun(tenantId, reply.run_id!));
  }

  #requestId(): string {
    return newJobId(() => this.random.next()).slice(1);
  }

  listRuns(
    tenantId: string,
    jobId: string,
    opts: { status?: RunStatus; cursor?: string; limit: number },
  ): Promise<Page<RunView>> {
    return this.#runs.listRuns(tenantId, jobId, opts);
  }

  listTenantRuns(
    tenantId: string,
    opts: { status?: RunStatus; cursor?: string; limit: number },
  ): Promise<Page<RunView>> {
    return this.#runs.listTenantRuns(tenantId, opts);
  }

  listDeadLetters(
    tenantId: string,
    opts: { cursor?: string; limit: number },
  ): Promise<Page<RunView>> {
    return this.#runs.listDeadLetters(tenantId, opts);
  }

  getRun(tenantId: string, runId: string): Promise<RunView> {
    return this.#runs.getRun(tenantId, runId);
  }

  cancelRun(tenantId: string, runId: string, by: string, note?: string): Promise<RunView> {
    return this.#runs.cancelRun(tenantId, runId, by, note);
  }
}
