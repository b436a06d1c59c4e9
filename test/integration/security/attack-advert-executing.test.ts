/**
 * Forged executing counts (docs/security.md, "Workers are believed only so far"): a worker's
 * advert carries its attempts executing by tenant (`executing`), which the fleet actor subtracts
 * from each tenant's part when it turns its rounding of the fair shares. On a real nats-server,
 * worker-w1's credentials advertise 4 slots and counts of tenant A's attempts: counts within its 4
 * slots are believed (a lying worker tilts the rounding by its own slots at most), while counts
 * beyond them — one huge count, more tenants than slots, a count within slots inflated to a
 * billion — are not believed at all (the scheduler's worker directory reports the fleet's
 * executions unknown, and the fleet goes by the grants held), and the scheduler is told which
 * field it cut. The directory is the one a scheduler runs (src/slots/worker-directory.ts), on a
 * scheduler's credentials, with limits of 16 slots and 4 prefetch places per worker.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { encode } from "../../../src/cluster/codec.ts";
import { connectNats } from "../../../src/cluster/nats.ts";
import { systemClock } from "../../../src/lib/clock.ts";
import { systemRandom } from "../../../src/lib/random.ts";
import { workerAdvertSubject, type WorkerAdvert } from "../../../src/protocol/worker.ts";
import { WorkerDirectory } from "../../../src/slots/worker-directory.ts";
import type { ClampedField } from "../../../src/slots/worker-trust.ts";
import { startNats, type NatsFixture } from "../../support/nats.ts";
import { eventually } from "../../support/kairos.ts";

const TA = "texecaaaaaaaaaaaa";
const TB = "texecbbbbbbbbbbbb";

describe("a worker forging its executing counts", { timeout: 120_000 }, () => {
  let nats: NatsFixture;
  let scheduler: NatsConnection;
  let attacker: NatsConnection;
  let dir: WorkerDirectory;
  const clamps: ClampedField[][] = [];

  before(async () => {
    nats = await startNats({ workers: ["w1"] });
    scheduler = await nats.connect("exec-scheduler", ["scheduler"]);
    dir = new WorkerDirectory(systemClock, systemRandom, 3_000, {
      limits: { maxSlots: 16, maxPrefetch: 4 },
      onClamped: (worker, fields) => {
        if (worker === "w1") clamps.push(fields);
      },
    });
    dir.start(scheduler, "kairos");
    await scheduler.flush();
    attacker = await connectNats({
      url: nats.url,
      name: "attacker-w1-executing",
      credsFile: nats.auth.credsForWorker("w1"),
    });
  });

  after(async () => {
    dir?.stop();
    await attacker?.close();
    await scheduler?.close();
    await nats?.stop();
  });

  let marker = 0;
  /**
   * Publishes w1's advert (its `free` a marker, 0..4, unlike the last one's) as the attacker,
   * waits until the directory has it, then until the directory sums the executions again; that
   * sum.
   */
  const advertise = async (
    a: Omit<WorkerAdvert, "worker_id" | "free" | "executor">,
  ): Promise<ReadonlyMap<string, number> | undefined> => {
    marker = (marker + 1) % 5;
    const before = dir.executingByTenant();
    attacker.publish(
      workerAdvertSubject("kairos", "w1"),
      encode({ worker_id: "w1", free: marker, executor: "docker", ...a }),
    );
    await attacker.flush();
    await eventually(
      async () =>
        dir.list(10).find((w) => w.worker_id === "w1")?.free === marker ? true : undefined,
      10_000,
      `the directory has w1's advert with free ${marker}`,
    );
    const sum = await eventually(
      async () => {
        const s = dir.executingByTenant();
        return s !== before ? { s } : undefined;
      },
      10_000,
      "the directory sums the executions again",
    );
    return sum.s;
  };

  it("counts within its believed slots are believed: the tilt is its own slots at most", async () => {
    const s = await advertise({ slots: 4, executing: { [TA]: 3, [TB]: 1 } });
    assert.deepEqual(s && [...s].sort(), [
      [TA, 3],
      [TB, 1],
    ]);
    assert.deepEqual(clamps, []);
  });

  const forged: {
    what: string;
    advert: Omit<WorkerAdvert, "worker_id" | "free" | "executor">;
    cut: ClampedField[];
  }[] = [
    {
      what: "a billion of tenant A's attempts on 4 slots",
      advert: { slots: 4, executing: { [TA]: 1_000_000_000 } },
      cut: ["executing"],
    },
    {
      what: "5 tenants' attempts on 4 slots",
      advert: {
        slots: 4,
        executing: Object.fromEntries(
          ["a", "b", "c", "d", "e"].map((x) => [`texec${x.repeat(12)}`, 1]),
        ),
      },
      cut: ["executing"],
    },
    {
      what: "a billion slots and a billion of tenant A's attempts (slots believed up to 16)",
      advert: { slots: 1_000_000_000, executing: { [TA]: 1_000_000_000 } },
      cut: ["slots", "executing"],
    },
    {
      what: "17 of tenant A's attempts on slots cut to 16",
      advert: { slots: 1_000, executing: { [TA]: 17 } },
      cut: ["slots", "executing"],
    },
  ];

  for (const f of forged) {
    it(`${f.what}: not believed at all, the scheduler told`, async () => {
      // An advert within the limits first: the directory tells of a clamp once until then.
      await advertise({ slots: 4, executing: { [TA]: 1 } });
      clamps.length = 0;
      const s = await advertise(f.advert);
      assert.equal(
        s,
        undefined,
        `the fleet's executions by tenant after the forged advert: ${JSON.stringify(s && [...s])}`,
      );
      assert.deepEqual(clamps, [f.cut]);
    });
  }

  it("counts up to the believed slots when the advert says more slots: believed up to 16", async () => {
    const s = await advertise({ slots: 1_000, executing: { [TA]: 16 } });
    assert.deepEqual(s && [...s], [[TA, 16]]);
  });
});
