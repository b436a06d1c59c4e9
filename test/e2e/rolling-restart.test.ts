/**
 * A rolling deploy of the worker fleet inside the look-ahead window loses no run and runs none
 * twice: 1,000 runs due together, prepared ahead on three workers with stable ids (as the Nomad
 * job names them), default retry policy (max_attempts 1). Every worker is restarted under its own
 * id, one by one, before the due instant — two drained (SIGTERM), one killed (SIGKILL). Every run
 * must execute exactly once and succeed: the attempts a drained worker held are given back and
 * offered again at once (worker/drain.ts `#giveBack`); those a killed one held are probed after their
 * lease, answered `unknown` by the new process, and offered again uncounted (run-lifecycle.ts
 * `lapse`). Real nats-server, real node processes (noop executor: the count of starts is what is
 * judged, not the task).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  apiClient,
  eventually,
  startKairosFixture,
  type Api,
  type KairosFixture,
} from "../support/kairos.ts";
import type { NodeProc } from "../support/nodes.ts";

const RUNS = 1_000;
const WORKERS = ["w1", "w2", "w3"] as const;

interface Run {
  run_id: string;
  status: string;
  attempts: { worker: string | null; outcome: string | null; error: string | null }[];
}
type Evt = { type: string; run_id?: string };
const evt = (e: unknown): Evt => e as Evt;

describe(
  "rolling restart of every worker under its own id, inside the look-ahead window",
  { timeout: 600_000 },
  () => {
    let fx: KairosFixture;
    let api: Api;
    before(async () => {
      fx = await startKairosFixture();
      const node = fx.spawn("s1", "api,scheduler", ["--rate-limit", "0"]);
      const t = await fx.newTenant("rolling");
      await fx.tenants.setQuota(t.tenant_id, { max_concurrent_runs: 5_000 });
      api = apiClient(await fx.apiUrl(node), t.api_key);
    });
    after(async () => {
      await fx?.stop();
    });

    const worker = async (id: string): Promise<NodeProc> => {
      const w = fx.spawn(id, "worker", [
        "--executor",
        "noop",
        "--slots",
        String(RUNS),
        "--drain-timeout-ms",
        "10000",
      ]);
      await w.waitFor((e) => e.type === "node_started", 60_000, `${id} started`);
      return w;
    };
    const allEvents = (type: string) =>
      fx.nodes.flatMap((n) =>
        n.events.filter((e) => evt(e).type === type).map((e) => evt(e).run_id!),
      );

    it("1,000 runs with max_attempts 1 each execute exactly once and succeed", async () => {
      const procs = new Map<string, NodeProc>();
      for (const id of WORKERS) procs.set(id, await worker(id));
      // Due well inside the 5 min window, far enough out for the creates and three restarts.
      const due = new Date(Math.ceil((Date.now() + 150_000) / 1000) * 1000).toISOString();
      const jobs: string[] = [];
      const queue = Array.from({ length: RUNS }, (_, i) => i);
      await Promise.all(
        Array.from({ length: 16 }, async () => {
          for (let i = queue.shift(); i !== undefined; i = queue.shift()) {
            const r = await api.call<{ job_id: string }>("POST", "/v1/jobs", {
              name: `r${i}`,
              schedule: { at: due },
              task: { image: "noop", args: ["true"], timeout_s: 60 },
            });
            assert.equal(r.status, 201, JSON.stringify(r.body));
            jobs.push(r.body.job_id);
          }
        }),
      );
      // Every run prepared ahead: offered to and accepted by a worker before any restart.
      await eventually(
        async () => (new Set(allEvents("worker_accepted")).size >= RUNS ? true : undefined),
        120_000,
        `${RUNS} runs accepted ahead`,
      );
      assert.ok(Date.now() < Date.parse(due) - 30_000, "prepared with time left for the restarts");

      for (const [id, how] of [
        ["w1", "SIGTERM"],
        ["w2", "SIGKILL"],
        ["w3", "SIGTERM"],
      ] as const) {
        const old = procs.get(id)!;
        const held = new Set(
          old.events.filter((e) => evt(e).type === "worker_accepted").map((e) => evt(e).run_id),
        );
        old.signal(how);
        await old.exited;
        procs.set(id, await worker(id));
        assert.ok(held.size > 0, `${id} held prepared runs when it was restarted`);
      }
      assert.ok(Date.now() < Date.parse(due), "every restart happened before the due instant");

      const runs = await eventually(
        async () => {
          const out: Run[] = [];
          const list = [...jobs];
          await Promise.all(
            Array.from({ length: 16 }, async () => {
              for (let j = list.shift(); j !== undefined; j = list.shift()) {
                const r = await api.call<{ runs: Run[] }>("GET", `/v1/jobs/${j}/runs`);
                const run = r.body.runs?.[0];
                if (
                  run &&
                  ["succeeded", "failed", "timed_out", "cancelled", "skipped"].includes(run.status)
                )
                  out.push(run);
              }
            }),
          );
          return out.length === RUNS ? out : undefined;
        },
        240_000,
        `all ${RUNS} runs ended`,
      );

      const notOk = runs.filter((r) => r.status !== "succeeded");
      assert.deepEqual(notOk.slice(0, 5), [], `${notOk.length} runs did not succeed`);
      const starts = new Map<string, number>();
      for (const id of allEvents("worker_started")) starts.set(id, (starts.get(id) ?? 0) + 1);
      const twice = [...starts].filter(([, n]) => n > 1);
      assert.deepEqual(twice.slice(0, 5), [], `${twice.length} runs started more than once`);
      assert.equal(
        runs.filter((r) => starts.get(r.run_id) === 1).length,
        RUNS,
        "every run started exactly once",
      );
    });
  },
);
