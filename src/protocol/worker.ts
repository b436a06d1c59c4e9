/**
 * The worker protocol: what job actors (src/jobs) and workers (src/worker) say to each other. A
 * leaf module (it imports nothing), so both depend on it and neither on the other.
 * - Adverts on `kairos.<cluster>.adverts.<worker id>` (`WorkerAdvert`); a scheduler takes one
 *   only when its `worker_id` is the subject's.
 * - Offers to ONE worker on `…worker.<id>.start` (`StartRequest`/`StartReply`), cancels on
 *   `.cancel`, probes of a silent lease on `.probe` (`ProbeRequest`/`ProbeReply`).
 * - Workers send `heartbeat` and `complete` to the job actor over the worker plane; those are
 *   the only job actor messages a worker identity may deliver (`WORKER_TO_JOB_KINDS`).
 *
 * Pitfall: these shapes travel as msgpack between versions during a rolling upgrade: add
 * optional fields, never rename or repurpose one.
 */

/** The actor type of a job actor: workers address heartbeats and completions to it. */
export const JOB_ACTOR = "job";

/**
 * The job actor messages a worker sends (on the worker plane, `kairos.<cluster>.w.<n>`): the
 * only ones a worker identity can deliver. Everything else a job actor accepts comes from api and
 * scheduler identities on `….p.<n>`.
 */
export const WORKER_TO_JOB_KINDS = ["heartbeat", "complete"] as const;

/** A task's network: none at all, or egress through the worker's proxy. */
export type TaskNetwork = "none" | "egress";
export const TASK_NETWORKS = ["none", "egress"] as const satisfies readonly TaskNetwork[];

/** A job's task, as stored in its spec and offered to a worker. */
export interface TaskInput {
  image: string;
  args: string[];
  env: Record<string, string>;
  timeout_s: number;
  resources?: { memory_mb?: number; cpus?: number; pids?: number };
  /**
   * `egress`: the task may reach the destinations of its tenant's egress policy through the
   * worker's egress proxy (src/sandbox/egress-proxy.ts). Absent or `none`: no network at all.
   */
  network?: TaskNetwork;
  /**
   * Write-only secrets, in plaintext only between the API's validator and the jobs service,
   * which seals them (secret-env.ts) before the job leaves the API node; never stored or shown.
   */
  secret_env?: Record<string, string>;
  /** What a job stores of its secrets: their names and which sealed version holds the values. */
  sealed_env?: { names: string[]; ref: string };
  /** Responses only: the names of the job's secrets (their values are never returned). */
  secret_env_names?: string[];
}

/** What a worker reports when an attempt ends. */
export interface Completion {
  outcome: "exited" | "timed_out" | "killed" | "oom" | "error";
  exit_code: number | null;
  output: string;
  error: { class: string; message: string; retryable: boolean } | null;
  started_at_ms: number;
  finished_at_ms: number;
  /** The registry digest (`sha256:…`) of the image the attempt ran in, when it came from a registry. */
  image_digest?: string;
  /**
   * The worker gives the attempt back without ever having started it (a drain drops the attempts
   * it holds ahead of their start): the owner offers the run again at once and does not count the
   * attempt. `outcome` is then `error` (retryable), which an owner that predates this field reads
   * as a failed attempt to retry. Also on the report of a cancelled attempt that never started
   * (`outcome` `killed`): a run its job's pause or schedule change stopped is then recorded
   * cancelled "before it started" (run-lifecycle.ts `endStopped`).
   */
  not_started?: true;
}

/**
 * A worker's slot advert (every heartbeat, and at once when a slot or a prefetch place frees), on
 * `workerAdvertSubject` of its own `worker_id`.
 */
export interface WorkerAdvert {
  worker_id: string;
  slots: number;
  /**
   * Offers it would take now: free slots plus free places in its prefetch queue (not counting the
   * places it keeps for offers on time: src/worker/slot-ledger.ts).
   */
  free: number;
  executor: string;
  /**
   * Attempts it accepts beyond its slots, each started the moment a slot frees after its start
   * (absent: a worker that predates it, none). The fleet shares slots plus prefetch between tenants.
   */
  prefetch?: number;
  /**
   * Attempts executing on it now, by tenant id (tenants with none left out; at most one entry per
   * slot). The fleet actor turns the rounding of fair shares by the slots tenants' runs actually
   * execute in (src/slots/fleet-actor.ts). Absent: a worker that predates it.
   */
  executing?: Record<string, number>;
}

/**
 * Where worker `workerId` advertises. Not under `…worker.` (`workerSubject`): a worker named
 * `hb` would otherwise receive, as offers, the adverts of a worker named `start`.
 */
export function workerAdvertSubject(cluster: string, workerId: string): string {
  return `kairos.${cluster}.adverts.${workerId}`;
}

/** Every worker's adverts (what a scheduler's worker directory subscribes to). */
export function workerAdvertWildcard(cluster: string): string {
  return `kairos.${cluster}.adverts.*`;
}

/** The worker id an advert's subject names (its last token). */
export function advertSubjectWorker(subject: string): string {
  return subject.slice(subject.lastIndexOf(".") + 1);
}

export function workerSubject(
  cluster: string,
  workerId: string,
  verb: "start" | "cancel" | "probe",
): string {
  return `kairos.${cluster}.worker.${workerId}.${verb}`;
}

/**
 * An offer made at most this long after its run's start instant is on time: its grant came by the
 * time the run was due, as a tenant within its share gets them. A worker keeps places of its own
 * for those (src/worker/slot-ledger.ts), and a scheduler offers them apart from the backlogs
 * (src/slots/worker-directory.ts `pick`, `waitForRoom`).
 */
export const ON_TIME_MS = 1_000;

/** Offer of one attempt to a worker; the worker starts it at `start_at_ms` by its own timer. */
export interface StartRequest {
  job_actor: string;
  tenant_id: string;
  job_id: string;
  run_id: string;
  attempt: number;
  fence: number;
  scheduled_for_ms: number;
  start_at_ms: number;
  task: TaskInput;
  /**
   * The owner's lease TTL: the worker starts the attempt only after a heartbeat for it was
   * acknowledged, and kills it once its last acknowledged heartbeat (send time) is older than
   * this minus its safety margin — the worker's half of "both sides of a lease keep time".
   */
  lease_ttl_ms: number;
  /**
   * The tenant's weight (fair shares): a worker with every slot taken gives a freed slot to the
   * waiting attempt whose tenant holds fewest of its slots per unit of weight
   * (src/worker/slot-ledger.ts). Absent (an owner that predates it, or none known): 1.
   */
  weight?: number;
  /**
   * The owner's wall clock when it sent the offer. The worker starts the attempt no earlier than
   * `start_at_ms` − START_SKEW_TOLERANCE_MS by the OWNER's clock (this value carried forward on
   * the worker's monotonic clock), whatever its own wall clock says: a worker whose clock runs
   * ahead would otherwise start runs prepared ahead early, by up to the whole look-ahead window.
   * Absent (an owner that predates it): the worker's own clock decides.
   */
  owner_now_ms?: number;
  /**
   * The attempt's run token (a JWT signed by the owner, src/secrets/run-token.ts), given to the
   * task as `KAIROS_RUN_TOKEN`. Absent: the owner has no run-token key (or predates them).
   */
  run_token?: string;
  /**
   * For a task with `network: "egress"`: its tenant's egress policy as the owner read it for this
   * offer (entries of src/sandbox/egress-policy.ts), which the worker's proxy enforces for the
   * attempt. Absent or empty: the attempt may reach nothing (a policy cleared since the job was
   * created, or an owner that predates egress).
   */
  egress?: string[];
  /**
   * The tenant's credential for the registry of `task.image` (src/secrets/registry-credentials.ts),
   * opened by the owner for this one offer; the worker uses it only to pull that image. Absent: the
   * tenant has none for that registry. Never logged, stored or shown.
   */
  registry_auth?: OfferedRegistryAuth;
}

/** A registry credential in an offer. */
export interface OfferedRegistryAuth {
  /** The registry host of `task.image` (normalised, e.g. `docker.io`, `127.0.0.1:5000`). */
  registry: string;
  username: string;
  password: string;
}

/** Longest fields of `registry_auth` a worker accepts. */
export const MAX_REGISTRY_AUTH_CHARS = { registry: 255, username: 256, password: 8192 } as const;

/** The shape of `Completion.image_digest`; a job actor keeps nothing else from a worker. */
export const IMAGE_DIGEST = /^sha256:[a-f0-9]{64}$/;

/** Longest `run_token` a worker accepts in an offer (a token is about 600 characters). */
export const MAX_RUN_TOKEN_CHARS = 2048;
/** The shape of a compact JWS: three base64url parts. */
export const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

/**
 * How far before `start_at_ms`, by its owner's clock, a worker may start an attempt: the offer's
 * time is read before its transit, so the owner's clock as the worker carries it lags by the
 * offer's one-way latency — a start is deferred only when that lag passes this tolerance, and is
 * then late by the excess, never early by more than this.
 */
export const START_SKEW_TOLERANCE_MS = 1_000;

/**
 * The owner's answer to one heartbeat (the `v` of its item result).
 * - `hold`: keep the attempt, do not start it yet (a run prepared ahead under overlap `skip`
 *   while an earlier run is active; the owner decides at the due instant).
 * - `cover_ms`: the owner's lease for this attempt, not started yet, runs at least this long from
 *   the owner's now (its start_at + TTL). The worker may then start it at start_at and run it
 *   until its SEND time + `cover_ms` − margin with no further acknowledgement: the send preceded
 *   the owner's now, so this ends before the owner's lease does whatever the two wall clocks say.
 *   Absent: the acknowledgement covers the usual send time + TTL − margin.
 */
export interface HeartbeatAck {
  ok: true;
  hold?: true;
  cover_ms?: number;
}

export interface StartReply {
  accepted: boolean;
  reason?: string;
}

export interface CancelRequest {
  run_id: string;
  fence: number;
}

/** The owner of a lease that fell silent asks its worker what became of the attempt. */
export interface ProbeRequest {
  run_id: string;
  attempt: number;
  fence: number;
}

/**
 * A worker's answer to a probe, for the attempt under that fence:
 * - `not_started`: never started here, and now never will (a held one is dropped by the probe);
 * - `running`: it runs here (the worker is alive: the owner keeps the lease), or it was killed at
 *   once and the kill's result is not in yet (it may have exited 0 by itself just before);
 * - `ended`: it ended here; `completion` is its report (its copies may still be on the wire, or
 *   given up: kept as long as the attempt is remembered, its output past a budget replaced by a note);
 * - `started`: it started here and is gone, its result lost (killed, self-fenced, lease lost —
 *   not one that had exited 0 by itself just before the kill: that answers `ended`);
 * - `unknown`: no memory of it (forgotten beyond the bound, or another incarnation of the worker).
 */
export interface ProbeReply {
  state: "not_started" | "running" | "ended" | "started" | "unknown";
  completion?: Completion;
}
