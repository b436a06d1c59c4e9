/**
 * A stand-in for a worker process, for the deadline tests: builds an executor, starts one task,
 * prints one JSON line per event on stdout ({"started":true}, then {"result":…}) and exits when
 * the task ends. The tests kill it with SIGKILL or freeze it with SIGSTOP mid-task.
 *
 * argv[2]: JSON { kind, options, task, identity } (see deadline.test.ts).
 */
import {
  createExecutor,
  type ExecutorKind,
  type ExecutorOptions,
  type RunIdentity,
  type TaskSpec,
} from "../../../src/sandbox/index.ts";

interface Spec {
  kind: ExecutorKind;
  options: ExecutorOptions;
  task: TaskSpec;
  identity: RunIdentity;
}

const spec = JSON.parse(process.argv[2] ?? "{}") as Spec;
const ex = await createExecutor(spec.kind, spec.options);
const exec = ex.start(spec.task, spec.identity);
process.stdout.write(`${JSON.stringify({ started: true, pid: process.pid })}\n`);
const result = await exec.result;
process.stdout.write(`${JSON.stringify({ result })}\n`);
await ex.close();
