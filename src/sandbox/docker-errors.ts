/**
 * Classifies Docker Engine failures (dockerode errors) into the sandbox's error classes.
 * The engine answers 404 for a missing image, 400 for a configuration it rejects, and
 * 400/500 with an OCI runtime message when the command cannot be executed; anything else
 * (socket down, 5xx, timeouts) is an `executor_failure` worth retrying elsewhere.
 *
 * The messages go to tenants (a run's `attempts[].error`), so they never carry the engine's own
 * text: it can name host paths, runtime versions, storage drivers, other images or registry
 * hosts. The executor logs the engine's message for the operator (`ExecutorOptions.log`).
 */
import type { ExecutionError } from "./types.ts";
import type { Clock } from "../lib/clock.ts";
import { messageOf } from "./settle.ts";

export type EnginePhase = "pull" | "create" | "start" | "run";

/** HTTP status of a dockerode error, if it has one. */
export function statusOf(e: unknown): number | undefined {
  if (typeof e === "object" && e !== null && "statusCode" in e) {
    const s = e.statusCode;
    return typeof s === "number" ? s : undefined;
  }
  return undefined;
}

/** The engine's own message (dockerode puts the body's `message` into `json`). */
export function engineMessage(e: unknown): string {
  if (typeof e === "object" && e !== null && "json" in e) {
    const j = e.json;
    if (typeof j === "object" && j !== null && "message" in j && typeof j.message === "string")
      return j.message;
  }
  return messageOf(e);
}

const NOT_EXECUTABLE =
  /executable file not found|no such file or directory|exec format error|not a directory/i;

export function classifyEngineError(e: unknown, phase: EnginePhase, image: string): ExecutionError {
  const status = statusOf(e);
  const msg = engineMessage(e);
  if (status === undefined) {
    return {
      class: "executor_failure",
      message: `the worker's container engine did not answer during ${phase} (image ${image}); retryable`,
      retryable: true,
    };
  }
  if ((phase === "create" || phase === "pull") && status === 404) {
    return {
      class: "image_not_found",
      message: `image ${image} is not available on this worker`,
      retryable: false,
    };
  }
  if (phase === "start" && NOT_EXECUTABLE.test(msg)) {
    return {
      class: "invalid_task",
      message: `cannot execute the task's command in ${image} (not found or not executable)`,
      retryable: false,
    };
  }
  if (/permission denied/i.test(msg) && phase === "start") {
    return {
      class: "permission_denied",
      message: `permission denied starting the task in ${image}`,
      retryable: false,
    };
  }
  if (status === 400 && phase !== "run") {
    return {
      class: "invalid_task",
      message: `the container engine rejected the task's container configuration (image ${image})`,
      retryable: false,
    };
  }
  return {
    class: "executor_failure",
    message: `container engine error during ${phase} (image ${image}, HTTP ${status}); retryable`,
    retryable: true,
  };
}

// The engine's words for a registry refusing a pull (distribution's `UNAUTHORIZED`/`DENIED`, the
// engine's own "no basic auth credentials" and Docker Hub's "pull access denied").
const UNAUTHORIZED =
  /unauthorized|authentication required|no basic auth credentials|access denied|access to the resource is denied|incorrect username or password|\b401\b|\b403\b/i;
const NOT_FOUND = /manifest unknown|not found|name unknown|no such image/i;
// No answer from the registry: refused, unresolvable, timed out, reset, TLS or HTTP mismatch.
const UNREACHABLE =
  /connection refused|no such host|i\/o timeout|timeout|timed out|did not answer|connection reset|network is unreachable|no route to host|\btls\b|x509|server gave http response|\bEOF\b|dial tcp|lookup /i;

/**
 * A failed pull (docker-image.ts `PullFailure`) as the tenant sees it: the registry refused the
 * credential or its lack (`image_unauthorized`), has no such image (`image_not_found`), or could not
 * be reached (`registry_unreachable`, retryable); anything else is `executor_failure` (retryable).
 * The message names the image and registry, never the engine's own text or a credential.
 */
export function classifyPullFailure(
  f: { message: string; status: number | undefined; registry: string; withCredential: boolean },
  image: string,
): ExecutionError {
  const msg = f.message;
  if (f.status === 401 || f.status === 403 || UNAUTHORIZED.test(msg)) {
    return {
      class: "image_unauthorized",
      message: f.withCredential
        ? `registry ${f.registry} refused this tenant's credentials for image ${image} (unauthorized, or no access to that repository)`
        : `registry ${f.registry} refused to serve image ${image} without credentials, and this tenant has none for it (an operator sets them with kairos admin tenant registry)`,
      retryable: false,
    };
  }
  if (f.status === 404 || NOT_FOUND.test(msg)) {
    return {
      class: "image_not_found",
      message: `image ${image} was not found in registry ${f.registry}`,
      retryable: false,
    };
  }
  if (UNREACHABLE.test(msg)) {
    return {
      class: "registry_unreachable",
      message: `registry ${f.registry} could not be reached to pull image ${image}; retryable`,
      retryable: true,
    };
  }
  return {
    class: "executor_failure",
    message: `pull of image ${image} from registry ${f.registry} failed${f.status !== undefined ? ` (HTTP ${f.status})` : ""}; retryable`,
    retryable: true,
  };
}

/** Rejects with a labelled error if `p` does not settle within `ms` (the engine may hang). */
export function withTimeout<T>(p: Promise<T>, ms: number, what: string, clock: Clock): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const cancel = clock.setTimer(ms, () =>
      reject(new Error(`Docker engine did not answer ${what} within ${ms} ms`)),
    );
    p.then(
      (v) => {
        cancel();
        resolve(v);
      },
      (e: unknown) => {
        cancel();
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}
