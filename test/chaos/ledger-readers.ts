/**
 * Reading the ledger of executions: the process executor's tasks append `start|end|killed <run>
 * <attempt> <fence> <worker> <epoch_ms> <tenant> <pid>` lines (`killed` from a TERM trap); a
 * task killed with SIGKILL writes nothing, so its end is taken from the OS (`PidWatcher`). For
 * the docker executor, the engine's event stream (container start / die, kairos.* labels).
 */
import { existsSync, readFileSync } from "node:fs";
import { dockerClient } from "../support/docker-image.ts";
import type { Exec } from "./ledger-types.ts";

/**
 * Watches the pids of started tasks that wrote no end line yet and records when each is gone: a
 * task killed with SIGKILL (a worker fencing itself kills without grace) cannot write a `killed`
 * line, so its end is taken from the OS (within one poll interval, i.e. conservatively late).
 */
export class PidWatcher {
  readonly gone = new Map<string, number>();
  #timer: NodeJS.Timeout | undefined;
  #offset = 0;
  readonly #open = new Map<string, number>();
  constructor(private readonly path: string) {}
  start(): void {
    this.#timer = setInterval(() => this.#poll(), 100);
    this.#timer.unref();
  }
  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#poll();
  }
  #poll(): void {
    let text = "";
    try {
      const all = readFileSync(this.path, "utf8");
      text = all.slice(this.#offset);
      const last = text.lastIndexOf("\n");
      if (last < 0) text = "";
      else {
        text = text.slice(0, last + 1);
        this.#offset += last + 1;
      }
    } catch {
      return;
    }
    for (const line of text.split("\n")) {
      const f = line.trim().split(/\s+/);
      if (f.length < 8) continue;
      const [kind, run, , fence, worker, , , pid] = f as [
        string,
        string,
        string,
        string,
        string,
        string,
        string,
        string,
      ];
      const key = `${run}/${fence}/${worker}/${pid}`;
      if (kind === "start") this.#open.set(key, Number(pid));
      else this.#open.delete(key);
    }
    const now = Date.now();
    for (const [key, pid] of this.#open) {
      if (!executing(pid)) {
        this.gone.set(key, now);
        this.#open.delete(key);
      }
    }
  }
}

/**
 * Whether a task process still executes. A zombie does not: a task SIGKILLed by its supervisor
 * while its worker is frozen (SIGSTOP) stays a zombie until the worker resumes and reaps it, and
 * `kill(pid, 0)` still succeeds on it — that made every frozen-worker kill look like an overlap.
 */
export function executing(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z" && state !== "X";
  } catch {
    try {
      process.kill(pid, 0); // no /proc: the best this platform offers
      return !existsSync("/proc/self/stat");
    } catch {
      return false;
    }
  }
}

export function readProcessLedger(path: string, gone?: ReadonlyMap<string, number>): Exec[] {
  const execs = new Map<string, Exec>();
  for (const line of readFileSync(path, "utf8").split("\n")) {
    const f = line.trim().split(/\s+/);
    if (f.length < 8) continue;
    const [kind, run, attempt, fence, worker, ms, tenant, pid] = f as [
      string,
      string,
      string,
      string,
      string,
      string,
      string,
      string,
    ];
    const key = `${run}/${fence}/${worker}/${pid}`;
    if (kind === "start") {
      execs.set(key, {
        run,
        attempt: Number(attempt),
        fence: Number(fence),
        worker,
        tenant,
        key,
        startMs: Number(ms),
        endMs: undefined,
        how: "open",
        endLine: false,
      });
    } else if ((kind === "end" || kind === "killed") && execs.has(key)) {
      const e = execs.get(key)!;
      if (kind === "end") e.endLine = true;
      if (e.endMs === undefined) {
        e.endMs = Number(ms);
        e.how = kind;
      } else if (kind === "killed" && e.how === "end") {
        // A TERM between the end line and the shell's exit: the trap exits 143, the worker saw a
        // kill (and its run may be retried). The end time stays the first line's.
        e.how = "killed";
      }
    }
  }
  for (const e of execs.values()) {
    const g = gone?.get(e.key);
    if (e.endMs === undefined && g !== undefined) {
      e.endMs = g;
      e.how = "gone";
    }
  }
  return [...execs.values()];
}

/** Collects container start/die events of managed containers as executions. */
export class DockerLedger {
  readonly execs = new Map<string, Exec>();
  #stream: (NodeJS.ReadableStream & { destroy?: () => void }) | undefined;

  async start(): Promise<void> {
    this.#stream = await dockerClient().getEvents({
      filters: { type: ["container"], event: ["start", "die"], label: ["kairos.managed=true"] },
    });
    let buf = "";
    this.#stream.on("data", (d: Buffer) => {
      buf += d.toString("utf8");
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line.trim()) this.#onEvent(JSON.parse(line) as DockerEvent);
      }
    });
    this.#stream.on("error", () => undefined);
  }

  #onEvent(ev: DockerEvent): void {
    const a = ev.Actor?.Attributes ?? {};
    const id = ev.Actor?.ID ?? ev.id ?? "";
    const ms = ev.timeNano ? Math.floor(ev.timeNano / 1e6) : (ev.time ?? 0) * 1000;
    const action = ev.Action ?? ev.status;
    if (action === "start") {
      this.execs.set(id, {
        run: a["kairos.run_id"] ?? "?",
        attempt: Number(a["kairos.attempt"]),
        fence: Number(a["kairos.fence"]),
        worker: a["kairos.worker_id"] ?? "?",
        tenant: a["kairos.tenant_id"] ?? "?",
        key: id,
        startMs: ms,
        endMs: undefined,
        how: "open",
        endLine: false,
      });
    } else if (action === "die") {
      const e = this.execs.get(id);
      if (e && e.endMs === undefined) {
        e.endMs = ms;
        // Its own end (exit 0, `sleep` done) or a kill (self-fencing, a cancel: 137, 143).
        e.how = a["exitCode"] === "0" ? "end" : "killed";
        e.endLine = e.how === "end";
      }
    }
  }

  open(): number {
    return [...this.execs.values()].filter((e) => e.endMs === undefined).length;
  }

  stop(): void {
    this.#stream?.destroy?.();
  }
}

interface DockerEvent {
  Action?: string;
  status?: string;
  id?: string;
  time?: number;
  timeNano?: number;
  Actor?: { ID?: string; Attributes?: Record<string, string> };
}
