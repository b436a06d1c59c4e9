/**
 * Test harness for real `kairos node` processes. Each node logs its lifecycle events as JSON
 * lines on stdout (`evt` field); `waitFor` resolves on the first matching event (already seen or
 * future) so tests wait on events, never sleeps. Every process is killed when the test process
 * exits, whatever happened. KAIROS_TEST_NODE_LOGS=<dir> keeps each node's output in <dir>.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createWriteStream, mkdirSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import type { NodeEvent } from "../../src/cluster/events.ts";

export interface NodeProc {
  readonly nodeId: string;
  readonly pid: number;
  readonly events: NodeEvent[];
  /** Resolves with the first event matching `pred` (searching already-seen events first). */
  waitFor(pred: (e: NodeEvent) => boolean, timeoutMs: number, phase: string): Promise<NodeEvent>;
  /** Partitions currently held according to this node's events. */
  held(): Set<number>;
  signal(sig: NodeJS.Signals): void;
  /** SIGTERM and wait for exit (SIGKILL after `killAfterMs`, default 10 s). */
  stop(killAfterMs?: number): Promise<number | null>;
  readonly exited: Promise<number | null>;
  /** Resolves when the node's stdout has ended and every line of it has been handled. */
  readonly outputEnded: Promise<void>;
  /** What the node wrote on stderr so far. */
  stderr(): string;
}

const procs = new Set<ChildProcess>();
process.on("exit", () => {
  for (const p of procs) p.kill("SIGKILL");
});

/** A worker's per-run log lines (`ignoreLines` for benchmarks: their process also runs the measured scheduler). */
export const RUN_LINES = /"evt":"worker_(accepted|started|completed)"/;

export interface SpawnOptions {
  natsUrl: string;
  /** The NATS credentials file of the node's role set (`NatsFixture.credsFor(roles)`). */
  creds: string;
  nodeId: string;
  roles?: string;
  partitions?: number;
  leaseTtlMs?: number;
  extraArgs?: string[];
  env?: Record<string, string>;
  /**
   * Output lines matching this are neither parsed nor kept as events (a benchmark's worker writes
   * three lines per run: parsing and keeping 600,000 of them cost the benchmark process — which
   * also runs the measured scheduler — CPU and heap). They still go to KAIROS_TEST_NODE_LOGS.
   */
  ignoreLines?: RegExp;
  /** Called with each line `ignoreLines` kept out (unparsed): a benchmark's cheap count of them. */
  onIgnoredLine?: (line: string) => void;
}

export function spawnNode(o: SpawnOptions): NodeProc {
  // KAIROS_TEST_NODE_CPU_PROF=<dir>: every spawned node writes a CPU profile there when it exits
  // (profiling a benchmark's worker process: BENCHMARKS.md, "Method").
  const profDir = process.env["KAIROS_TEST_NODE_CPU_PROF"];
  // KAIROS_TEST_NODE_FLAGS="--trace-gc …": more node/V8 flags for every spawned node (a
  // benchmark's GC pauses are read from its output, kept by KAIROS_TEST_NODE_LOGS).
  const flags = (process.env["KAIROS_TEST_NODE_FLAGS"] ?? "").split(" ").filter((f) => f !== "");
  const args = [
    ...(profDir ? ["--cpu-prof", "--cpu-prof-dir", profDir] : []),
    ...flags,
    // As a deployed node runs (package.json, bin/kairos.mjs, the Nomad job): docs/operations.md.
    "--max-semi-space-size=64",
    "--import",
    "tsx",
    "src/cli/main.ts",
    "node",
    "--nats",
    o.natsUrl,
    "--nats-creds",
    o.creds,
    "--node-id",
    o.nodeId,
    "--roles",
    o.roles ?? "scheduler",
    "--partitions",
    String(o.partitions ?? 32),
    ...(o.leaseTtlMs ? ["--lease-ttl-ms", String(o.leaseTtlMs)] : []),
    ...(o.extraArgs ?? []),
  ];
  const child = spawn(process.execPath, args, {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, KAIROS_LOG_LEVEL: "info", ...o.env },
  });
  procs.add(child);
  // KAIROS_TEST_NODE_LOGS=<dir>: every node's stdout and stderr, kept for a post-mortem.
  const logDir = process.env["KAIROS_TEST_NODE_LOGS"];
  if (logDir) {
    mkdirSync(logDir, { recursive: true });
    const out = createWriteStream(join(logDir, `${o.nodeId}-${child.pid}.log`));
    child.stdout.pipe(out, { end: false });
    child.stderr.pipe(out, { end: false });
    // 'close', not 'exit': the pipes may still hold output when the process exits (its last
    // words, e.g. a crash's stack), and a write after end would crash the test process.
    child.on("close", (code, signal) => out.end(`\n[exit ${code ?? ""}${signal ?? ""}]\n`));
  }
  const events: NodeEvent[] = [];
  const waiters = new Set<{ pred: (e: NodeEvent) => boolean; resolve: (e: NodeEvent) => void }>();
  const held = new Set<number>();
  const stderr: string[] = [];
  child.stderr.setEncoding("utf8").on("data", (d: string) => stderr.push(d));
  const lineReader = createInterface({ input: child.stdout });
  const outputEnded = new Promise<void>((resolve) => lineReader.once("close", resolve));
  lineReader.on("line", (line) => {
    if (o.ignoreLines?.test(line)) {
      o.onIgnoredLine?.(line);
      return;
    }
    let rec: { evt?: string } & Record<string, unknown>;
    try {
      rec = JSON.parse(line) as typeof rec;
    } catch {
      return;
    }
    if (!rec.evt) return;
    const e = { ...rec, type: rec.evt } as unknown as NodeEvent;
    events.push(e);
    if (e.type === "partition_acquired") held.add(e.partition);
    if (e.type === "partition_released" || e.type === "partition_lost") held.delete(e.partition);
    for (const w of [...waiters]) {
      if (w.pred(e)) {
        waiters.delete(w);
        w.resolve(e);
      }
    }
  });
  const exited = new Promise<number | null>((resolve) => {
    child.on("exit", (code) => {
      procs.delete(child);
      resolve(code);
    });
  });
  return {
    nodeId: o.nodeId,
    pid: child.pid!,
    events,
    exited,
    held: () => new Set(held),
    waitFor(pred, timeoutMs, phase) {
      const seen = events.find(pred);
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const w = {
          pred,
          resolve: (e: NodeEvent) => {
            clearTimeout(t);
            resolve(e);
          },
        };
        const t = setTimeout(() => {
          waiters.delete(w);
          reject(
            new Error(
              `${o.nodeId}: timed out after ${timeoutMs} ms waiting for ${phase}; last events: ${JSON.stringify(events.slice(-5))}; stderr: ${stderr.join("").slice(-500)}`,
            ),
          );
        }, timeoutMs);
        waiters.add(w);
      });
    },
    outputEnded,
    stderr: () => stderr.join(""),
    signal: (sig) => child.kill(sig),
    async stop(killAfterMs = 10_000) {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill("SIGCONT");
      child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), killAfterMs);
      const code = await exited;
      clearTimeout(t);
      return code;
    },
  };
}

/**
 * Resolves when `check()` holds. The check reads state that node events and test traffic update;
 * a short poll only wakes us up to re-read it (the assertion is on state, not on elapsed time).
 */
export function until(
  _nodes: readonly NodeProc[],
  check: () => boolean,
  timeoutMs: number,
  phase: string,
): Promise<void> {
  return new Promise((resolve, reject) => {
    if (check()) return resolve();
    const t = setTimeout(() => {
      clearInterval(poll);
      reject(new Error(`timed out after ${timeoutMs} ms waiting for ${phase}`));
    }, timeoutMs);
    const poll = setInterval(() => {
      if (check()) {
        clearTimeout(t);
        clearInterval(poll);
        resolve();
      }
    }, 20);
  });
}
