/**
 * A cheap "does the executor answer" probe for readiness (/readyz on worker nodes): the Docker
 * engine must answer a ping; the process and noop executors have nothing to ask. Resolves to a
 * short description, rejects with the reason the engine did not answer.
 */
import Dockerode from "dockerode";
import type { ExecutorKind } from "./types.ts";
import { engineMessage } from "./docker-errors.ts";

export function executorProbe(
  kind: ExecutorKind,
  opts: { socketPath?: string } = {},
): () => Promise<string> {
  if (kind !== "docker") return async () => `${kind} executor`;
  const docker =
    opts.socketPath === undefined
      ? new Dockerode()
      : new Dockerode({ socketPath: opts.socketPath });
  return async () => {
    try {
      await docker.ping();
      return "docker engine answers";
    } catch (e) {
      throw new Error(`docker engine does not answer: ${engineMessage(e)}`);
    }
  };
}
