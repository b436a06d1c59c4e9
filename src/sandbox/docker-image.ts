/**
 * Image provisioning for the `if_missing` pull policy: inspect the image on the worker host
 * and pull it from its registry only when it is absent. With the default policy "never" the
 * executor does not call this and a missing image is `image_not_found` at create time.
 */
import type Dockerode from "dockerode";
import type { Clock } from "../lib/clock.ts";
import { statusOf, withTimeout } from "./docker-errors.ts";

/** Bound on one pull (large images on slow links); beyond it the attempt is a retryable failure. */
const PULL_TIMEOUT_MS = 10 * 60 * 1000;

/** Makes sure `image` is on the host, pulling it if missing. Errors keep their engine status. */
export async function ensureImage(
  docker: Dockerode,
  image: string,
  engineTimeoutMs: number,
  clock: Clock,
): Promise<void> {
  try {
    await withTimeout(docker.getImage(image).inspect(), engineTimeoutMs, "image inspect", clock);
    return;
  } catch (e) {
    if (statusOf(e) !== 404) throw e;
  }
  const toError = (e: unknown): Error =>
    e instanceof Error ? e : new Error(`pull of ${image} failed`);
  const pulled = docker.pull(image).then(
    (stream: NodeJS.ReadableStream) =>
      new Promise<void>((resolve, reject) => {
        docker.modem.followProgress(stream, (doneErr: unknown) =>
          doneErr ? reject(toError(doneErr)) : resolve(),
        );
      }),
  );
  await withTimeout(pulled, PULL_TIMEOUT_MS, `pull of ${image}`, clock);
}
