/**
 * Human-readable console output for `kairos dev` on a terminal. The node logs JSON lines (pino)
 * everywhere else; here the same lines are condensed for a person:
 *
 * - partition events become one summary line once they settle ("holding 16/16 partitions"),
 *   instead of a line per partition; a lost partition is printed at once;
 * - actor activation and passivation (frequent, internal) are not printed;
 * - worker events become "run <id> attempt <n> <what>" (the worker's own, such as draining on
 *   Ctrl-C, "worker <what>" with their fields);
 * - anything at warn or above is printed with its fields.
 *
 * Gotcha: a summary is printed after 300 ms without partition events (a host timer, fine here:
 * this is an entry-point concern, not actor or cluster logic); `flush()` prints a pending one at
 * once, so the partitions released by Ctrl-C are reported before "stopping nats-server".
 */
import { systemClock, type Clock } from "../lib/clock.ts";
import type { LogDestination } from "../lib/log.ts";

const QUIET_EVENTS = new Set([
  "actor_activated",
  "actor_passivated",
  "node_started",
  "node_stopping",
  "api_listening",
  "metrics_listening",
]);
const LEVELS: Record<number, string> = {
  10: "TRACE",
  20: "DEBUG",
  30: "INFO",
  40: "WARN",
  50: "ERROR",
  60: "FATAL",
};
const SKIP_FIELDS = new Set([
  "level",
  "time",
  "node",
  "name",
  "msg",
  "evt",
  "type",
  "pid",
  "hostname",
]);

function hhmmss(time: unknown): string {
  return typeof time === "string" && time.length >= 19 ? time.slice(11, 19) : "";
}

function fields(o: Record<string, unknown>): string {
  return Object.entries(o)
    .filter(([k]) => !SKIP_FIELDS.has(k))
    .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
    .join(" ");
}

/** Formats JSON log lines for a person; `partitions()` is the cluster's partition count for the summary. */
export class DevConsole implements LogDestination {
  readonly #out: (line: string) => void;
  readonly #held = new Set<number>();
  #partitions: () => number;
  readonly #clock: Clock;
  /** Cancels the pending partition summary (an unref'd timer of the system clock). */
  #summaryTimer: (() => void) | undefined;
  #lastSummary = "";

  constructor(
    out: (line: string) => void = (l) => process.stdout.write(l + "\n"),
    partitions: () => number = () => 0,
    clock: Clock = systemClock,
  ) {
    this.#out = out;
    this.#clock = clock;
    this.#partitions = partitions;
  }

  setPartitionCount(fn: () => number): void {
    this.#partitions = fn;
  }

  /** One JSON log line in; zero or one human line out (now or, for partitions, a little later). */
  write(line: string): void {
    let o: Record<string, unknown>;
    try {
      o = JSON.parse(line) as Record<string, unknown>;
    } catch {
      this.#out(line.trimEnd());
      return;
    }
    const level = typeof o["level"] === "number" ? o["level"] : 30;
    const evt = typeof o["evt"] === "string" ? o["evt"] : undefined;
    const t = hhmmss(o["time"]);
    if (evt === "partition_acquired" || evt === "partition_released" || evt === "partition_lost") {
      const p = typeof o["partition"] === "number" ? o["partition"] : -1;
      if (evt === "partition_acquired") this.#held.add(p);
      else this.#held.delete(p);
      if (evt === "partition_lost")
        this.#out(`${t} WARN partition ${p} lost (${String(o["reason"])})`);
      this.#armSummary();
      return;
    }
    if (level < 40 && evt !== undefined && QUIET_EVENTS.has(evt)) return;
    if (level < 40 && evt?.startsWith("worker_")) {
      const what = evt.slice("worker_".length).replace(/_/g, " ");
      // Attempt events name their run; the worker's own (draining, drained) are printed with their fields.
      if (typeof o["run_id"] === "string")
        this.#out(`${t} run ${o["run_id"]} attempt ${String(o["attempt"])} ${what}`);
      else this.#out(`${t} worker ${what}${fields(o) ? "  " + fields(o) : ""}`);
      return;
    }
    if (level < 40 && (evt === "member_joined" || evt === "member_left")) {
      this.#out(
        `${t} ${evt === "member_joined" ? "member joined" : "member left"}: ${String(o["nodeId"])}${evt === "member_left" ? ` (${String(o["reason"])})` : ""}`,
      );
      return;
    }
    const rest = fields(o);
    const label = level >= 40 ? `${LEVELS[level] ?? level} ` : "";
    this.#out(
      `${t} ${label}${typeof o["msg"] === "string" ? o["msg"] : (evt ?? "")}${rest ? "  " + rest : ""}`,
    );
  }

  /** Prints a pending partition summary now (the node has stopped: nothing more will settle). */
  flush(): void {
    if (!this.#summaryTimer) return;
    this.#summaryTimer();
    this.#summarise();
  }

  #armSummary(): void {
    this.#summaryTimer?.();
    this.#summaryTimer = this.#clock.setTimer(300, () => this.#summarise());
  }

  #summarise(): void {
    this.#summaryTimer = undefined;
    const total = this.#partitions();
    const s = `scheduler: holding ${this.#held.size}${total > 0 ? `/${total}` : ""} partitions`;
    if (s !== this.#lastSummary)
      this.#out(`${new Date(this.#clock.now()).toISOString().slice(11, 19)} ${s}`);
    this.#lastSummary = s;
  }
}
