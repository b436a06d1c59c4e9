/**
 * Sandbox benchmark (`npm run bench -- sandbox [--n 20]`):
 * 1. start-to-exit latency of one `true` container through the docker executor
 *    (create → attach → start → wait → remove) next to `docker run --rm --network none
 *    <image> true` spawned via the CLI, interleaved in the same run; mean/p50/p95 and ratio;
 * 2. containers per second the executor sustains at concurrency 2 and 4 (N containers each).
 * Appends a section with the machine and the measured figures to BENCHMARKS.md.
 */
import { execFile, spawn } from "node:child_process";
import { performance } from "node:perf_hooks";
import { promisify } from "node:util";
import { randomUUID } from "node:crypto";
import { createExecutor, type Executor, type RunIdentity } from "../src/sandbox/index.ts";
import { ensureTestImage, removeWorkerContainers } from "../test/support/docker-image.ts";
import { appendSection, machine } from "./report.ts";

const exec = promisify(execFile);

interface Stats {
  mean: number;
  p50: number;
  p95: number;
}

function stats(xs: number[]): Stats {
  const s = [...xs].sort((a, b) => a - b);
  const q = (p: number): number => s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)]!;
  return { mean: s.reduce((a, b) => a + b, 0) / s.length, p50: q(0.5), p95: q(0.95) };
}

function parseN(args: string[]): number {
  const i = args.indexOf("--n");
  const n = i >= 0 ? Number(args[i + 1]) : 20;
  if (!Number.isInteger(n) || n < 1)
    throw new Error(`--n must be a positive integer, got ${args[i + 1]}`);
  return n;
}

function ident(workerId: string): RunIdentity {
  return {
    runId: `bench-${randomUUID()}`,
    attempt: 1,
    jobId: "bench",
    tenantId: "bench",
    scheduledFor: new Date(0).toISOString(),
    workerId,
    fence: 1,
  };
}

async function executorRun(ex: Executor, image: string, workerId: string): Promise<number> {
  const t0 = performance.now();
  const r = await ex.start({ image, args: ["true"], env: {}, timeoutS: 60 }, ident(workerId))
    .result;
  const ms = performance.now() - t0;
  if (r.outcome !== "exited" || r.exitCode !== 0)
    throw new Error(`executor run failed: ${JSON.stringify(r)}`);
  return ms;
}

function cliRun(image: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const p = spawn("docker", ["run", "--rm", "--network", "none", image, "true"], {
      stdio: "ignore",
    });
    p.on("error", reject);
    p.on("exit", (code) =>
      code === 0 ? resolve(performance.now() - t0) : reject(new Error(`docker run exited ${code}`)),
    );
  });
}

async function throughput(
  ex: Executor,
  image: string,
  workerId: string,
  n: number,
  concurrency: number,
): Promise<number> {
  let next = 0;
  const t0 = performance.now();
  const lane = async (): Promise<void> => {
    while (next < n) {
      next++;
      await executorRun(ex, image, workerId);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, lane));
  return n / ((performance.now() - t0) / 1000);
}

async function machineWithDocker(): Promise<string> {
  const docker = (
    await exec("docker", [
      "version",
      "--format",
      "server {{.Server.Version}}, client {{.Client.Version}}",
    ])
  ).stdout.trim();
  return `${machine()}, docker ${docker}`;
}

const f = (x: number): string => x.toFixed(1);

export async function run(args: string[]): Promise<void> {
  const n = parseN(args);
  const image = await ensureTestImage();
  const workerId = `bench-${randomUUID().slice(0, 8)}`;
  const ex = await createExecutor("docker", { workerId });
  try {
    await executorRun(ex, image, workerId); // warm-up both paths once
    await cliRun(image);
    const mine: number[] = [];
    const cli: number[] = [];
    for (let i = 0; i < n; i++) {
      mine.push(await executorRun(ex, image, workerId));
      cli.push(await cliRun(image));
    }
    const a = stats(mine);
    const b = stats(cli);
    const rate2 = await throughput(ex, image, workerId, n, 2);
    const rate4 = await throughput(ex, image, workerId, n, 4);
    const date = (await exec("date", ["-u"])).stdout.trim();
    const lines = [
      `start-to-exit of \`true\`, ${n} runs each, interleaved (ms):`,
      `  docker executor (locked down)            mean ${f(a.mean)}  p50 ${f(a.p50)}  p95 ${f(a.p95)}`,
      `  docker run --rm --network none (CLI)     mean ${f(b.mean)}  p50 ${f(b.p50)}  p95 ${f(b.p95)}`,
      `  ratio executor/CLI                       mean ${(a.mean / b.mean).toFixed(2)}  p50 ${(a.p50 / b.p50).toFixed(2)}`,
      `sustained by the executor, ${n} containers each:`,
      `  concurrency 2: ${rate2.toFixed(2)} containers/s`,
      `  concurrency 4: ${rate4.toFixed(2)} containers/s`,
    ];
    console.log(lines.join("\n"));
    await appendSection(
      "sandbox (docker executor)",
      [
        `date: ${date}`,
        `machine: ${await machineWithDocker()}`,
        `command: \`npm run bench -- sandbox${args.length ? " " + args.join(" ") : ""}\``,
        `image: ${image} (busybox-static imported locally); each executor run creates, attaches, starts, waits for and force-removes one container`,
      ],
      lines,
    );
  } finally {
    await ex.close();
    await removeWorkerContainers(workerId);
  }
}
