/** `kairos node` flag validation: the health and metrics listener (`--metrics-port`, `--metrics-token-file`), limits, NATS. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  API_NODE_NICE,
  cpuNiceFlag,
  mailFromFlags,
  metricsTokenFromFlag,
  nodeConfigFromFlags,
  portFlag,
  prefetchFlag,
  pullFlag,
  rateLimitsFromFlags,
  taskLimitsFromFlags,
} from "../../src/cli/node-flags.ts";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { isKairosError } from "../../src/lib/errors.ts";

describe("--metrics-port", () => {
  it("accepts 0-65535 and leaves an absent flag unset", () => {
    assert.equal(portFlag(undefined, "metrics-port"), undefined);
    assert.equal(portFlag("0", "metrics-port"), 0);
    assert.equal(portFlag("9102", "metrics-port"), 9102);
    assert.equal(portFlag("65535", "metrics-port"), 65535);
  });

  it("refuses anything else with a message naming the flag", () => {
    for (const bad of ["65536", "-1", "9.5", "abc", ""]) {
      assert.throws(
        () => portFlag(bad, "metrics-port"),
        (e: unknown) =>
          isKairosError(e, "invalid_argument") && e.message.startsWith("--metrics-port:"),
        bad,
      );
    }
  });
});

describe("--prefetch", () => {
  it("takes a whole number ≥ 0 and refuses anything else, naming the flag", () => {
    assert.equal(prefetchFlag("0"), 0);
    assert.equal(prefetchFlag("13"), 13);
    for (const bad of ["-1", "1.5", "abc"]) {
      assert.throws(
        () => prefetchFlag(bad),
        (e: unknown) => isKairosError(e, "invalid_argument") && e.message.startsWith("--prefetch:"),
        bad,
      );
    }
  });
});

describe("--pull", () => {
  it("defaults to if_missing, takes never, if_missing and always, refuses anything else", () => {
    assert.equal(pullFlag(undefined), "if_missing");
    for (const p of ["never", "if_missing", "always"] as const) assert.equal(pullFlag(p), p);
    for (const bad of ["", "Always", "missing", "sometimes"])
      assert.throws(
        () => pullFlag(bad),
        (e: unknown) => isKairosError(e, "invalid_argument") && e.message.startsWith("--pull:"),
      );
  });
});

describe("--metrics-token-file", () => {
  const dir = mkdtempSync(join(tmpdir(), "kairos-metrics-token-"));
  const file = (name: string, text: string): string => {
    const p = join(dir, name);
    writeFileSync(p, text);
    return p;
  };
  it("reads the token, trimmed; no flag is no token", () => {
    assert.deepEqual(metricsTokenFromFlag(undefined), {});
    assert.deepEqual(metricsTokenFromFlag(file("ok", "  0123456789abcdef0123\n")), {
      metricsToken: "0123456789abcdef0123",
    });
  });
  it("refuses a missing file, a short token and one with spaces, naming the flag", () => {
    for (const p of [
      join(dir, "absent"),
      file("short", "abc\n"),
      file("spaces", "0123456789 abcdef0123"),
    ]) {
      assert.throws(
        () => metricsTokenFromFlag(p),
        (e: unknown) => isKairosError(e, "invalid_argument") && e.field === "metrics-token-file",
        p,
      );
    }
  });
});

describe("--task-max-memory-mb, --task-max-cpus, --task-max-pids", () => {
  it("give the cluster's per-task maxima; absent flags keep the defaults", () => {
    assert.deepEqual(taskLimitsFromFlags({}), { maxMemoryMb: 2048, maxCpus: 2, maxPids: 512 });
    assert.deepEqual(
      taskLimitsFromFlags({ taskMaxMemoryMb: "4096", taskMaxCpus: "0.5", taskMaxPids: "128" }),
      { maxMemoryMb: 4096, maxCpus: 0.5, maxPids: 128 },
    );
  });
  it("refuse values outside the bounds a task may ask for, naming the flag", () => {
    for (const [f, field] of [
      [{ taskMaxMemoryMb: "8" }, "task-max-memory-mb"],
      [{ taskMaxMemoryMb: "512.5" }, "task-max-memory-mb"],
      [{ taskMaxCpus: "0" }, "task-max-cpus"],
      [{ taskMaxCpus: "65" }, "task-max-cpus"],
      [{ taskMaxPids: "x" }, "task-max-pids"],
      [{ taskMaxPids: "5000" }, "task-max-pids"],
    ] as const) {
      assert.throws(
        () => taskLimitsFromFlags(f),
        (e: unknown) =>
          isKairosError(e, "invalid_argument") &&
          e.field === field &&
          e.message.startsWith(`--${field}`),
        JSON.stringify(f),
      );
    }
  });
});

describe("--rate-limit, --rate-limit-burst, --auth-failure-limit", () => {
  it("map to the API's limits; absent flags leave the defaults", () => {
    assert.deepEqual(rateLimitsFromFlags({}), {});
    assert.deepEqual(rateLimitsFromFlags({ rateLimit: "5" }), {
      tenantPerSecond: 5,
      tenantBurst: 10,
    });
    assert.deepEqual(rateLimitsFromFlags({ rateLimit: "5", rateLimitBurst: "7" }), {
      tenantPerSecond: 5,
      tenantBurst: 7,
    });
    assert.deepEqual(rateLimitsFromFlags({ authFailureLimit: "0" }), {
      authFailuresPerSecond: 0,
      authFailuresBurst: 1,
    });
  });
  it("refuse non-numbers and a burst below 1", () => {
    for (const f of [
      { rateLimit: "-1" },
      { rateLimit: "" },
      { rateLimit: "1e9" },
      { rateLimitBurst: "0" },
      { authFailureLimit: "x" },
    ]) {
      assert.throws(
        () => rateLimitsFromFlags(f),
        (e: unknown) => isKairosError(e, "invalid_argument"),
        JSON.stringify(f),
      );
    }
  });
});

describe("--nats-creds, --nats-tls-*", () => {
  it("go into the node config; a client certificate needs its key", () => {
    const c = nodeConfigFromFlags(
      {
        natsCreds: "/etc/kairos/worker.json",
        natsTlsCa: "/etc/kairos/ca.pem",
        roles: "worker",
        nodeId: "w1",
      },
      "tls://nats:4222",
    );
    assert.deepEqual(c.natsAuth, {
      credsFile: "/etc/kairos/worker.json",
      tls: { caFile: "/etc/kairos/ca.pem" },
    });
    assert.throws(
      () => nodeConfigFromFlags({ natsTlsCert: "/c.pem", nodeId: "w1" }, "tls://nats:4222"),
      (e: unknown) => isKairosError(e, "invalid_argument"),
    );
    assert.throws(
      () => nodeConfigFromFlags({ natsCreds: " ", nodeId: "w1" }, "nats://x"),
      (e: unknown) => isKairosError(e, "invalid_argument"),
    );
  });
});

describe("--max-worker-slots, --max-worker-prefetch", () => {
  it("go into the node config; absent flags keep the defaults (1024, 256)", () => {
    const base = { nodeId: "s1", roles: "scheduler", natsCreds: "/etc/kairos/scheduler.json" };
    const d = nodeConfigFromFlags(base, "nats://x");
    assert.equal(d.maxWorkerSlots, 1_024);
    assert.equal(d.maxWorkerPrefetch, 256);
    const c = nodeConfigFromFlags(
      { ...base, maxWorkerSlots: "100000", maxWorkerPrefetch: "0" },
      "nats://x",
    );
    assert.equal(c.maxWorkerSlots, 100_000);
    assert.equal(c.maxWorkerPrefetch, 0);
  });

  it("refuse what is not a whole number in bounds, naming the flag", () => {
    const base = { nodeId: "s1", roles: "scheduler", natsCreds: "/etc/kairos/scheduler.json" };
    for (const [flags, field] of [
      [{ maxWorkerSlots: "lots" }, "max-worker-slots"],
      [{ maxWorkerSlots: "0" }, "max_worker_slots"],
      [{ maxWorkerSlots: "1000001" }, "max_worker_slots"],
      [{ maxWorkerPrefetch: "-1" }, "max_worker_prefetch"],
      [{ maxWorkerPrefetch: "2.5" }, "max-worker-prefetch"],
    ] as const) {
      assert.throws(
        () => nodeConfigFromFlags({ ...base, ...flags }, "nats://x"),
        (e: unknown) => isKairosError(e, "invalid_argument") && e.field === field,
        JSON.stringify(flags),
      );
    }
  });
});

describe("--smtp-url, --smtp-from, --mail-limit, --mail-window-s", () => {
  const none = { url: undefined, from: undefined };
  it("no SMTP server: no mail; with one, the validated config (flags or environment)", () => {
    assert.deepEqual(mailFromFlags({}, none), {});
    const m = mailFromFlags(
      { smtpUrl: "smtp://mail.example.com:2525", smtpFrom: "kairos@example.com", mailLimit: "5" },
      none,
    ).mail!;
    assert.equal(m.maxPerWindow, 5);
    assert.equal(m.windowMs, 600_000);
    assert.ok(Object.isFrozen(m));
    const env = mailFromFlags(
      { mailWindowS: "60" },
      {
        url: "smtps://u:p@mail.example.com",
        from: "k@example.com",
      },
    ).mail!;
    assert.deepEqual([env.from, env.windowMs], ["k@example.com", 60_000]);
  });

  it("refuses every bad value with a message naming the flag", () => {
    const cases: [Parameters<typeof mailFromFlags>[0], string][] = [
      [{ smtpFrom: "k@example.com" }, "--smtp-from: needs --smtp-url"],
      [{ mailLimit: "5" }, "--mail-limit: needs --smtp-url"],
      [{ smtpUrl: "http://mail.example.com", smtpFrom: "k@example.com" }, "--smtp-url:"],
      [{ smtpUrl: "not a url", smtpFrom: "k@example.com" }, "--smtp-url:"],
      [{ smtpUrl: "smtp://mail.example.com/x", smtpFrom: "k@example.com" }, "--smtp-url:"],
      [{ smtpUrl: "smtp://mail.example.com" }, "--smtp-from: required"],
      [{ smtpUrl: "smtp://mail.example.com", smtpFrom: "Kairos <k@example.com>" }, "--smtp-from:"],
      [
        { smtpUrl: "smtp://m.example.com", smtpFrom: "k@example.com", mailLimit: "0" },
        "--mail-limit:",
      ],
      [
        { smtpUrl: "smtp://m.example.com", smtpFrom: "k@example.com", mailLimit: "x" },
        "--mail-limit:",
      ],
      [
        { smtpUrl: "smtp://m.example.com", smtpFrom: "k@example.com", mailWindowS: "0" },
        "--mail-window-s:",
      ],
    ];
    for (const [f, prefix] of cases) {
      assert.throws(
        () => mailFromFlags(f, none),
        (e: unknown) => isKairosError(e, "invalid_argument") && e.message.startsWith(prefix),
        `${JSON.stringify(f)} → ${prefix}`,
      );
    }
  });
});

describe("--cpu-nice", () => {
  it("defaults to API_NODE_NICE for an api-only node and to 0 for any other role set", () => {
    assert.equal(cpuNiceFlag(undefined, ["api"]), API_NODE_NICE);
    assert.equal(cpuNiceFlag(undefined, ["api", "scheduler"]), 0);
    assert.equal(cpuNiceFlag(undefined, ["worker"]), 0);
    assert.equal(cpuNiceFlag("0", ["api"]), 0);
    assert.equal(cpuNiceFlag("19", ["scheduler"]), 19);
  });
  it("refuses anything but a whole number 0-19, naming the flag", () => {
    for (const bad of ["-1", "20", "1.5", "x", "", "100"])
      assert.throws(
        () => cpuNiceFlag(bad, ["api"]),
        (e: unknown) =>
          isKairosError(e) && e.code === "invalid_argument" && /--cpu-nice/.test(e.message),
      );
  });
});
