/**
 * Schedule engine benchmark (`npm run bench -- cron [--seconds 1] [--append]`): how many
 * `next(after, 1)` calls per second one core sustains for typical expressions in their zones,
 * chaining `after` = the previous result (the timer re-arm path of a million jobs). Each case
 * warms up (zone caches filled, JIT hot) and then runs for ~1 s. `after` wraps back to the
 * start when it passes 2040 so the zone caches hold the years a live scheduler would use.
 * Also measures compiling on a cache miss (jobs loaded at start-up).
 *
 * Prints a table; `--append` also appends a section with the machine to BENCHMARKS.md.
 */
import { loadavg } from "node:os";
import { performance } from "node:perf_hooks";
import { compileSchedule, type CompiledSchedule } from "../src/schedule/index.ts";
import { appendSection, machine } from "./report.ts";

const CASES: readonly { cron: string; tz: string }[] = [
  { cron: "*/5 * * * *", tz: "Europe/London" },
  { cron: "0 9 * * 1-5", tz: "Asia/Kolkata" },
  { cron: "30 2 * * *", tz: "America/New_York" },
  { cron: "0 0 1 * *", tz: "Australia/Lord_Howe" },
  { cron: "*/2 * * * * *", tz: "America/New_York" },
];
/** 2026-02-20: the seconds case crosses New York's 2026-03-08 gap within its run. */
const START_MS = Date.UTC(2026, 1, 20);
const WRAP_MS = Date.UTC(2040, 0, 1);
const BATCH = 1000;

interface Row {
  cron: string;
  tz: string;
  calls: number;
  seconds: number;
}

/** Calls `next(after, 1)` in batches until `seconds` have passed; returns calls and elapsed s. */
function measure(s: CompiledSchedule, seconds: number): { calls: number; elapsed: number } {
  let after = START_MS;
  let calls = 0;
  const t0 = performance.now();
  let elapsed = 0;
  while (elapsed < seconds) {
    for (let i = 0; i < BATCH; i++) {
      const next = s.next(after, 1)[0];
      if (next === undefined || next <= after)
        throw new Error(`bad result after ${after}: ${next}`);
      after = next >= WRAP_MS ? START_MS : next;
    }
    calls += BATCH;
    elapsed = (performance.now() - t0) / 1000;
  }
  return { calls, elapsed };
}

/** Compiles distinct expressions (cache misses: more than the 4096-entry cache) for `seconds`. */
function measureCompile(seconds: number): { compiles: number; elapsed: number } {
  const zones = CASES.map((c) => c.tz);
  let compiles = 0;
  const t0 = performance.now();
  let elapsed = 0;
  while (elapsed < seconds) {
    for (let i = 0; i < 100; i++, compiles++) {
      const k = compiles % (60 * 24 * zones.length);
      compileSchedule({
        cron: `${k % 60} ${Math.floor(k / 60) % 24} * * 1-5`,
        time_zone: zones[Math.floor(k / 1440)] ?? "UTC",
      });
    }
    elapsed = (performance.now() - t0) / 1000;
  }
  return { compiles, elapsed };
}

const fmt = (n: number): string => Math.round(n).toLocaleString("en-US");

export async function run(args: string[]): Promise<void> {
  const i = args.indexOf("--seconds");
  const seconds = i >= 0 ? Number(args[i + 1]) : 1;
  if (!(seconds > 0)) throw new Error("--seconds must be a positive number");
  const rows: Row[] = [];
  for (const c of CASES) {
    const s = compileSchedule({ cron: c.cron, time_zone: c.tz });
    measure(s, Math.min(0.3, seconds)); // warm-up: JIT and the zone's year caches
    const { calls, elapsed } = measure(s, seconds);
    rows.push({ ...c, calls, seconds: elapsed });
  }
  measureCompile(Math.min(0.3, seconds)); // warm-up
  const compile = measureCompile(seconds);
  const totalCalls = rows.reduce((a, r) => a + r.calls, 0);
  const totalSeconds = rows.reduce((a, r) => a + r.seconds, 0);
  const lines = [
    `${"expression".padEnd(16)}${"zone".padEnd(22)}${"calls".padStart(11)}${"s".padStart(7)}${"next/s".padStart(12)}${"µs/call".padStart(9)}`,
    ...rows.map(
      (r) =>
        `${JSON.stringify(r.cron).padEnd(16)}${r.tz.padEnd(22)}${fmt(r.calls).padStart(11)}${r.seconds.toFixed(2).padStart(7)}${fmt(r.calls / r.seconds).padStart(12)}${((r.seconds / r.calls) * 1e6).toFixed(2).padStart(9)}`,
    ),
    `${"total".padEnd(38)}${fmt(totalCalls).padStart(11)}${totalSeconds.toFixed(2).padStart(7)}${fmt(totalCalls / totalSeconds).padStart(12)}${((totalSeconds / totalCalls) * 1e6).toFixed(2).padStart(9)}`,
    `compile on cache miss ("m h * * 1-5" in the zones above): ${fmt(compile.compiles / compile.elapsed)}/s`,
  ];
  const load = loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");
  console.log(
    `next(after, 1) chained, one core, ~${seconds} s per case after warm-up (load average ${load})\n`,
  );
  console.log(lines.join("\n"));
  if (args.includes("--append")) await appendCronSection(lines, seconds, load);
}

async function appendCronSection(lines: string[], seconds: number, load: string): Promise<void> {
  await appendSection(
    "cron (schedule engine, `next(after, 1)` per second)",
    [
      `date: ${new Date().toUTCString()}`,
      `machine: ${machine()}; load average at the end ${load} (other work was running)`,
      `command: \`npm run bench -- cron${seconds === 1 ? "" : ` --seconds ${seconds}`}\` — one process, one core; \`after\` chained from 2026-02-20, wrapped at 2040`,
    ],
    lines,
  );
}
