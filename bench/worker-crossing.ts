/**
 * What crossing the WORKERS account costs the run path (`npm run bench -- worker-crossing
 * [--requests 5000] [--rounds 3] [--no-md]`): on one nats-server with the production account
 * layout (src/cluster/nats-accounts.ts), the same request answered inside KAIROS and across the
 * account boundary, in the same run (a shared machine's load moves both alike):
 *
 * - worker plane (heartbeats, completions): a `scheduler` identity answers on `kairos.<c>.w.0.*`,
 *   checking the reply as the partition owner does (reply-guard.ts, the `Nats-Request-Info` header
 *   for an imported request). Asked by a `scheduler_worker` identity in KAIROS (inside the
 *   account) and by the pinned `worker-w1` in WORKERS (a service import);
 * - offers: a `scheduler` identity asks `kairos.<c>.worker.<id>.start`, answered by a
 *   `scheduler_worker` identity in KAIROS and by `worker-w1` in WORKERS (a stream import, the
 *   answer crossing back into the scheduler's inbox).
 *
 * Each figure: `--requests` requests, 1 or 64 in flight, through the nodes' request mux; the
 * median of `--rounds` rounds (inside and across alternate). Prints a JSON summary last; appends a
 * section to BENCHMARKS.md unless --no-md.
 */
import { execFile } from "node:child_process";
import { loadavg } from "node:os";
import { performance } from "node:perf_hooks";
import { promisify } from "node:util";
import type { NatsConnection } from "@nats-io/transport-node";
import { connectNats } from "../src/cluster/nats.ts";
import { muxedBus } from "../src/cluster/request-mux.ts";
import { workerPlaneSender } from "../src/cluster/router.ts";
import { REQUEST_INFO_HEADER, replyRefusal, type Asker } from "../src/cluster/reply-guard.ts";
import { startNats } from "../test/support/nats.ts";
import { appendSection, machine } from "./report.ts";

const exec = promisify(execFile);
const C = "kairos";

function parseArgs(args: string[]) {
  const int = (name: string, dflt: number): number => {
    const i = args.indexOf(`--${name}`);
    if (i < 0) return dflt;
    const v = Number(args[i + 1]);
    if (!Number.isInteger(v) || v < 1 || v > 1_000_000)
      throw new Error(`--${name} must be an integer from 1 to 1000000, got ${args[i + 1]}`);
    return v;
  };
  return {
    requests: int("requests", 5000),
    rounds: int("rounds", 3),
    md: !args.includes("--no-md"),
  };
}

const pct = (sorted: number[], p: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
const median = (xs: number[]): number =>
  [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;

interface Figure {
  path: "worker plane" | "offers";
  via: "inside KAIROS" | "across WORKERS";
  inFlight: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
}

/** Answers every request on `subject` once its reply passes the guard for `asker` (as Kairos's responders do). */
function answer(
  nc: NatsConnection,
  subject: string,
  asker: (subject: string) => Asker,
  body: Uint8Array,
): void {
  nc.subscribe(subject, {
    queue: "owners",
    callback: (e, m) => {
      if (e) return;
      const refused = replyRefusal(m.reply, asker(m.subject), "per_user", () =>
        m.headers?.get(REQUEST_INFO_HEADER),
      );
      if (refused) throw new Error(`bench responder refused ${m.subject}: ${refused.detail}`);
      m.respond(body);
    },
  });
}

async function measure(
  nc: NatsConnection,
  subject: string,
  body: Uint8Array,
  requests: number,
  inFlight: number,
): Promise<{ perSecond: number; p50Ms: number; p99Ms: number }> {
  const bus = muxedBus(nc);
  const lat: number[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < requests) {
        next++;
        const s = performance.now();
        await bus.request(subject, body, { timeout: 10_000 });
        lat.push(performance.now() - s);
      }
    }),
  );
  const ms = performance.now() - t0;
  lat.sort((a, b) => a - b);
  const r = (x: number) => Math.round(x * 1000) / 1000;
  return {
    perSecond: Math.round((requests / ms) * 1000),
    p50Ms: r(pct(lat, 50)),
    p99Ms: r(pct(lat, 99)),
  };
}

export async function run(args: string[]): Promise<void> {
  const o = parseArgs(args);
  const fx = await startNats({ clusters: [C] });
  const figures: Figure[] = [];
  const open: NatsConnection[] = [];
  const as = async (name: string, creds: string) => {
    const nc = await connectNats({ url: fx.url, name, credsFile: creds });
    open.push(nc);
    return nc;
  };
  try {
    const scheduler = await as("bench-scheduler", fx.credsFor(["scheduler"]));
    const inside = await as("bench-scheduler-worker", fx.credsFor(["scheduler", "worker"]));
    const worker = await as("bench-worker-w1", fx.auth.credsForWorker("w1"));
    // A heartbeat batch's and an offer's size on the wire, roughly (msgpack).
    const heartbeat = new Uint8Array(300).fill(7);
    const offer = new Uint8Array(700).fill(9);
    const ack = new Uint8Array(120).fill(1);
    answer(
      scheduler,
      `kairos.${C}.w.0.*`,
      (s) => ({ kind: "worker", workerIds: [workerPlaneSender(s)] }),
      ack,
    );
    answer(inside, `kairos.${C}.worker.k1.start`, () => ({ kind: "scheduler" }), ack);
    answer(worker, `kairos.${C}.worker.w1.start`, () => ({ kind: "scheduler" }), ack);
    await Promise.all(open.map((nc) => nc.flush()));
    const cases = [
      {
        path: "worker plane",
        via: "inside KAIROS",
        nc: inside,
        subject: `kairos.${C}.w.0.k1`,
        body: heartbeat,
      },
      {
        path: "worker plane",
        via: "across WORKERS",
        nc: worker,
        subject: `kairos.${C}.w.0.w1`,
        body: heartbeat,
      },
      {
        path: "offers",
        via: "inside KAIROS",
        nc: scheduler,
        subject: `kairos.${C}.worker.k1.start`,
        body: offer,
      },
      {
        path: "offers",
        via: "across WORKERS",
        nc: scheduler,
        subject: `kairos.${C}.worker.w1.start`,
        body: offer,
      },
    ] as const;
    for (const inFlight of [1, 64]) {
      for (const c of cases)
        await measure(c.nc, c.subject, c.body, Math.min(500, o.requests), inFlight); // warm-up
      const rounds = new Map<
        (typeof cases)[number],
        { perSecond: number; p50Ms: number; p99Ms: number }[]
      >();
      for (let r = 0; r < o.rounds; r++) {
        for (const c of cases)
          rounds.set(c, [
            ...(rounds.get(c) ?? []),
            await measure(c.nc, c.subject, c.body, o.requests, inFlight),
          ]);
      }
      for (const c of cases) {
        const ms = rounds.get(c)!;
        const f: Figure = {
          path: c.path,
          via: c.via,
          inFlight,
          perSecond: median(ms.map((m) => m.perSecond)),
          p50Ms: median(ms.map((m) => m.p50Ms)),
          p99Ms: median(ms.map((m) => m.p99Ms)),
        };
        figures.push(f);
        console.log(
          `${f.path.padEnd(12)} ${f.via.padEnd(14)} ${String(inFlight).padStart(2)} in flight: ${String(f.perSecond).padStart(6)} req/s, p50 ${f.p50Ms} ms, p99 ${f.p99Ms} ms`,
        );
      }
    }
  } finally {
    for (const nc of open) await nc.close();
    await fx.stop();
  }
  const load = loadavg()
    .map((x) => x.toFixed(1))
    .join(", ");
  console.log(JSON.stringify({ bench: "worker-crossing", ...o, load, figures }));
  if (!o.md) return;
  const commit = (
    await exec("git", ["rev-parse", "--short", "HEAD"]).catch(() => ({ stdout: "unknown" }))
  ).stdout.trim();
  await appendSection(
    `Worker protocol inside KAIROS against across the WORKERS account (${new Date().toISOString().slice(0, 10)})`,
    [
      `machine: ${machine()}; ${(await exec("nats-server", ["--version"]).catch(() => ({ stdout: "nats-server: ?" }))).stdout.trim()}, one server on loopback`,
      `commit ${commit}; \`npm run bench -- worker-crossing --requests ${o.requests} --rounds ${o.rounds}\`; load average at the end ${load} (a shared machine: compare the rows with each other, not across runs)`,
    ],
    figures.map(
      (f) =>
        `${f.path.padEnd(12)} ${f.via.padEnd(14)} ${String(f.inFlight).padStart(2)} in flight: ${String(f.perSecond).padStart(6)}/s  p50 ${f.p50Ms} ms  p99 ${f.p99Ms} ms`,
    ),
  );
}
