/**
 * Getting an attempt's image onto the worker host by the node's pull policy (docs/sandbox.md,
 * "Images and registries"), pulling with the attempt's registry credential when its tenant has
 * one for the image's registry (the engine's `X-Registry-Auth`):
 *  - `never`: the image must be on the host; nothing is pulled, credentials are not used.
 *  - `if_missing`: pulled when absent. An image on the host that came from the task's repository
 *    (it has a RepoDigest there) may be another tenant's private image: it runs for a tenant only
 *    after a pull with that tenant's credential (or none) succeeded on this worker, remembered for
 *    VERIFIED_TTL_MS. Images built, imported or loaded on the host (no RepoDigest of that
 *    repository) are the operator's and run as they are.
 *  - `always`: pulled for every attempt: the registry decides each time.
 * The attempt then runs the image by its ID (not its name, which a concurrent pull may move), and
 * records its registry digest.
 *
 * Gotchas: the engine reports most pull failures inside the progress stream (HTTP 200 already
 * sent), not as a status: every progress line is checked for `error`. A credential is sent only to
 * the registry it was given for. Pull failures are `PullFailure`s, classified in docker-errors.ts.
 */
import type Dockerode from "dockerode";
import type { Clock } from "../lib/clock.ts";
import { engineMessage, statusOf, withTimeout } from "./docker-errors.ts";
import { parseImageRef, type ImageRef } from "./image-policy.ts";
import type { PullPolicy } from "./options.ts";
import type { RegistryAuth } from "./types.ts";
import { OrderedMap } from "../lib/ordered-map.ts";

/** Bound on one pull (large images on slow links); beyond it the attempt is a retryable failure. */
export const PULL_TIMEOUT_MS = 10 * 60 * 1000;
/** How long a tenant's successful pull of an image lets it run that image without pulling again. */
export const VERIFIED_TTL_MS = 10 * 60 * 1000;
/** Most (tenant, image) verifications remembered; the least recently used go first. */
const MAX_VERIFIED = 10_000;
/** Bytes of a pull's error text kept (the engine's, for the operator's log). */
const MAX_ERROR_CHARS = 1000;

/** A failed pull: the engine's status (if the request itself failed) and message. */
export class PullFailure extends Error {
  constructor(
    message: string,
    readonly status: number | undefined,
    readonly registry: string,
    readonly withCredential: boolean,
  ) {
    super(message.slice(0, MAX_ERROR_CHARS));
    this.name = "PullFailure";
  }
}

/** The image an attempt runs. */
export interface ProvidedImage {
  readonly info: Dockerode.ImageInspectInfo;
  /** `sha256:…` of the image in the task's repository, when it came from a registry. */
  readonly digest: string | undefined;
}

/** The RepoDigest (`sha256:…`) an image has in repository `ref`, if any. */
export function repoDigestOf(
  repoDigests: readonly string[] | null | undefined,
  ref: ImageRef,
): string | undefined {
  for (const d of repoDigests ?? []) {
    const have = parseImageRef(d);
    if (typeof have === "string" || have.digest === undefined) continue;
    if (have.registry === ref.registry && have.path === ref.path) return have.digest;
  }
  return undefined;
}

/**
 * Whether an attempt must pull before running (pure): `always`; absent; or present from the task's
 * repository and not verified for this tenant (`if_missing`). `never` never pulls.
 */
export function mustPull(
  policy: PullPolicy,
  present: Dockerode.ImageInspectInfo | null,
  ref: ImageRef,
  verifiedForTenant: boolean,
): boolean {
  switch (policy) {
    case "never":
      return false;
    case "always":
      return true;
    case "if_missing":
      if (present === null) return true;
      return repoDigestOf(present.RepoDigests, ref) !== undefined && !verifiedForTenant;
  }
}

export class ImageProvider {
  readonly #docker: Dockerode;
  readonly #policy: PullPolicy;
  readonly #engineTimeoutMs: number;
  readonly #clock: Clock;
  /** `${tenant} ${image id}` → mono ms until which the tenant's pull of it counts. */
  readonly #verified = new OrderedMap<string, number>();

  constructor(docker: Dockerode, policy: PullPolicy, engineTimeoutMs: number, clock: Clock) {
    this.#docker = docker;
    this.#policy = policy;
    this.#engineTimeoutMs = engineTimeoutMs;
    this.#clock = clock;
  }

  /**
   * Makes `image` available for an attempt of `tenantId` by the pull policy and inspects it.
   * Throws a `PullFailure` when a pull fails, the engine's error when an inspect does (404:
   * absent under `never`).
   */
  async provide(
    image: string,
    tenantId: string,
    auth: RegistryAuth | undefined,
    signal: AbortSignal,
  ): Promise<ProvidedImage> {
    const ref = parseImageRef(image);
    // Not a name (an image ID, say): never pulled; the executor refuses what it finds
    // (image-policy.ts `imageCarriesName`), as under `never`.
    if (typeof ref === "string")
      return { info: (await this.#inspect(image, false))!, digest: undefined };
    let info = await this.#inspect(image, this.#policy !== "never");
    if (mustPull(this.#policy, info, ref, info !== null && this.#isVerified(tenantId, info.Id))) {
      await this.#pull(ref, auth?.registry === ref.registry ? auth : undefined, signal);
      info = await this.#inspect(image, false);
      this.#remember(tenantId, info!.Id);
    }
    return { info: info!, digest: ref.digest ?? repoDigestOf(info!.RepoDigests, ref) };
  }

  async #inspect(image: string, absentIsNull: boolean): Promise<Dockerode.ImageInspectInfo | null> {
    try {
      return await withTimeout(
        this.#docker.getImage(image).inspect(),
        this.#engineTimeoutMs,
        "image inspect",
        this.#clock,
      );
    } catch (e) {
      if (absentIsNull && statusOf(e) === 404) return null;
      throw e;
    }
  }

  #isVerified(tenantId: string, imageId: string): boolean {
    const key = `${tenantId} ${imageId}`;
    const until = this.#verified.get(key);
    if (until === undefined) return false;
    if (until > this.#clock.monoMs()) return true;
    this.#verified.delete(key);
    return false;
  }

  #remember(tenantId: string, imageId: string): void {
    const key = `${tenantId} ${imageId}`;
    this.#verified.delete(key);
    this.#verified.set(key, this.#clock.monoMs() + VERIFIED_TTL_MS);
    if (this.#verified.size > MAX_VERIFIED) {
      const oldest = this.#verified.oldest();
      if (oldest !== undefined) this.#verified.delete(oldest);
    }
  }

  /** Pulls `ref` (by tag or digest), with `auth` if given; a `PullFailure` when it fails. */
  async #pull(ref: ImageRef, auth: RegistryAuth | undefined, signal: AbortSignal): Promise<void> {
    const fail = (msg: string, status: number | undefined): PullFailure =>
      new PullFailure(msg, status, ref.registry, auth !== undefined);
    const abort = new AbortController();
    const onAbort = (): void => abort.abort();
    signal.addEventListener("abort", onAbort, { once: true });
    const opts = {
      fromImage: `${ref.registry}/${ref.path}`,
      tag: ref.digest ?? ref.tag ?? "latest",
      abortSignal: abort.signal,
    };
    const authconfig =
      auth === undefined
        ? undefined
        : { username: auth.username, password: auth.password, serveraddress: auth.registry };
    const pulled = (async (): Promise<void> => {
      let stream: NodeJS.ReadableStream;
      try {
        stream = await this.#docker.createImage(authconfig, opts);
      } catch (e) {
        throw fail(engineMessage(e), statusOf(e));
      }
      await new Promise<void>((resolve, reject) => {
        let streamError: string | undefined;
        this.#docker.modem.followProgress(
          stream,
          (err: unknown) => {
            if (err) reject(fail(engineMessage(err), undefined));
            else if (streamError !== undefined) reject(fail(streamError, undefined));
            else resolve();
          },
          (line: { error?: unknown; errorDetail?: { message?: unknown } }) => {
            const msg = line.errorDetail?.message ?? line.error;
            if (msg !== undefined && streamError === undefined)
              streamError = typeof msg === "string" ? msg : JSON.stringify(msg);
          },
        );
      });
    })();
    try {
      await withTimeout(
        pulled,
        PULL_TIMEOUT_MS,
        `pull of ${ref.registry}/${ref.path}`,
        this.#clock,
      );
    } catch (e) {
      abort.abort();
      throw e instanceof PullFailure ? e : fail(engineMessage(e), undefined);
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }
}
