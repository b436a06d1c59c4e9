/**
 * Property: the API accepts a task exactly when a worker would run it. Random tasks — built from
 * the edges of every rule (reserved names in any case, NUL bytes, names that are not names,
 * resources at and around the node maxima) — are sent to the API (POST /v1/jobs over the fake
 * jobs service) and given, as the worker would build it from the stored job, to the executors'
 * own checks (src/sandbox/identity.ts `validateTask`, docker-spec.ts `resolveLimits` with the
 * node maxima the API was given). A 201 whose task an executor refuses is a create that
 * "succeeds into a task that cannot run"; an executor-acceptable task the API refuses is a rule
 * the API invented. fast-check prints the seed on failure.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { harness, validJob } from "../http/helpers.ts";
import { validateTask } from "../../../src/sandbox/identity.ts";
import { resolveLimits } from "../../../src/sandbox/docker-spec.ts";
import { resolveExecutorOptions } from "../../../src/sandbox/options.ts";
import { DEFAULT_TASK_LIMITS, type TaskLimits } from "../../../src/sandbox/task-rules.ts";
import type { TaskSpec } from "../../../src/sandbox/types.ts";
import type { JobSpec } from "../../../src/protocol/model.ts";

// Each rule is broken now and then, so that most tasks break at most one (and some none).
const name = fc.oneof(
  {
    arbitrary: fc.constantFrom("A", "PATH", "_x", "kairos", "KAIROSX", "KAIROS", "kairos_x"),
    weight: 6,
  },
  {
    arbitrary: fc.constantFrom("kairos_x", "KAIROS_RUN_ID", "Kairos_Token", "kAiRoS_", "kairos__"),
    weight: 2,
  },
  { arbitrary: fc.constantFrom("1BAD", "A-B", "A B", "", "É", "A=B", "A\0"), weight: 1 },
  {
    arbitrary: fc.string({ unit: fc.constantFrom("a", "K", "_", "1"), minLength: 1, maxLength: 8 }),
    weight: 2,
  },
);
const text = fc.oneof(
  {
    arbitrary: fc.string({ unit: fc.constantFrom("a", " ", "é", "=", "\n"), maxLength: 6 }),
    weight: 8,
  },
  { arbitrary: fc.constantFrom("a\0b", "\0", "x\0"), weight: 1 },
);
const resources = fc.record(
  {
    memory_mb: fc.constantFrom(16, 256, 2047, 2048, 2049, 4096, 65_536),
    cpus: fc.constantFrom(0.1, 1, 2, 2.5, 64),
    pids: fc.constantFrom(8, 64, 512, 513, 4096),
  },
  { requiredKeys: [] },
);
const taskBody = fc.record({
  args: fc.array(text, { minLength: 1, maxLength: 3 }),
  env: fc.dictionary(name, text, { maxKeys: 3 }),
  secret_env: fc.option(fc.dictionary(name, text, { maxKeys: 2 }), { nil: undefined }),
  resources: fc.option(resources, { nil: undefined }),
});

/** The task a worker builds from a stored job (worker.ts `newLease`; secrets opened into env). */
function asWorkerTask(t: JobSpec["task"]): TaskSpec {
  const spec: TaskSpec = {
    image: t.image,
    args: t.args,
    env: { ...t.env, ...t.secret_env },
    timeoutS: t.timeout_s,
  };
  if (t.resources) {
    spec.resources = {
      ...(t.resources.memory_mb ? { memoryMb: t.resources.memory_mb } : {}),
      ...(t.resources.cpus ? { cpus: t.resources.cpus } : {}),
      ...(t.resources.pids ? { pids: t.resources.pids } : {}),
    };
  }
  return spec;
}

function workerRefusal(task: TaskSpec, limits: TaskLimits): string | undefined {
  const docker = resolveExecutorOptions({ workerId: "w", docker: limits }).docker;
  const limited = resolveLimits(task, docker);
  return (
    validateTask(task, false)?.message ??
    validateTask(task, true)?.message ??
    ("class" in limited ? limited.message : undefined)
  );
}

describe("the API accepts a task exactly when a worker would run it", () => {
  for (const limits of [DEFAULT_TASK_LIMITS, { maxMemoryMb: 4096, maxCpus: 1, maxPids: 128 }]) {
    it(`node maxima ${JSON.stringify(limits)}`, async () => {
      await fc.assert(
        fc.asyncProperty(taskBody, async (t) => {
          const h = harness(undefined, limits);
          const task = {
            image: "busybox",
            timeout_s: 30,
            args: t.args,
            env: t.env,
            ...(t.secret_env ? { secret_env: t.secret_env } : {}),
            ...(t.resources ? { resources: t.resources } : {}),
          };
          const res = await h.req("POST", "/v1/jobs", { body: validJob({ task }) });
          const answer = await res.text();
          if (res.status === 201) {
            const stored = h.jobs.calls.find((c) => c.method === "createJob")!.args[0] as JobSpec;
            const refused = workerRefusal(asWorkerTask(stored.task), limits);
            assert.equal(refused, undefined, `created (201), but a worker refuses it: ${refused}`);
            return;
          }
          assert.ok(res.status === 400 || res.status === 422, `${res.status} ${answer}`);
          // Refused at the API: a worker must refuse it too, unless the API's own shape rules
          // (name/secret overlap, env count) or the secret_env of the request decided.
          const overlap = Object.keys(t.secret_env ?? {}).some((k) => k in t.env);
          if (overlap) return;
          const asSent = asWorkerTask({
            image: "busybox",
            args: t.args,
            env: t.env,
            timeout_s: 30,
            ...(t.secret_env ? { secret_env: t.secret_env } : {}),
            ...(t.resources ? { resources: t.resources } : {}),
          });
          assert.notEqual(
            workerRefusal(asSent, limits),
            undefined,
            `refused (${answer}), but a worker would run it`,
          );
        }),
        { numRuns: 1000 },
      );
    });
  }
});
