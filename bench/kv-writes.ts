/**
 * KV write ceiling (`npm run bench -- kv-writes [--records 200000] [--in-flight 2000]
 * [--bytes 700] [--no-md]`): how many run records one nats-server on this machine stores per
 * second through Kairos's own KV store (the runs bucket as a node opens it, file storage), with
 * nothing else running — the bound below which no settle time of a burst can go while each run's
 * end is a record write.
 *
 * `--records` records of `--bytes` bytes are created (a run's `create`), then each is updated
 * once at the revision its create returned (a run's terminal write), `--in-flight` operations at a
 * time from one connection. Last line: one JSON object with both rates.
 */
import { openBuckets } from "../src/cluster/buckets.ts";
import type { KvStore } from "../src/cluster/kv.ts";
import { startNats } from "../test/support/nats.ts";
import { intOption, wantsMarkdown } from "./options.ts";
import { timedPool } from "./pool.ts";
import { appendSection, machine } from "./report.ts";

/** `n` operations, `inFlight` at a time; operations per second. */
async function rate(n: number, inFlight: number, op: (i: number) => Promise<void>) {
  const s = (await timedPool(n, inFlight, op)) / 1000;
  return { seconds: +s.toFixed(2), per_s: Math.round(n / s) };
}

export async function run(args: string[]): Promise<void> {
  const records = intOption(args, "records", 200_000);
  const inFlight = intOption(args, "in-flight", 2000);
  const bytes = intOption(args, "bytes", 700);
  const nats = await startNats();
  const nc = await nats.connect("kv-writes");
  let summary: Record<string, unknown>;
  try {
    const kv: KvStore = (await openBuckets(nc, { clusterName: "kairos", replicas: 1 })).runs;
    const value = new Uint8Array(bytes).fill(120);
    const revisions = new Float64Array(records);
    // Keys as run records are keyed: by partition, then run id.
    const key = (i: number) => `${i % 32}.bench-${i}`;
    const creates = await rate(records, inFlight, async (i) => {
      const r = await kv.create(key(i), value);
      if (!r.ok) throw new Error(`create ${key(i)}: ${r.conflict}`);
      revisions[i] = r.revision;
    });
    const updates = await rate(records, inFlight, async (i) => {
      const r = await kv.update(key(i), value, revisions[i]!);
      if (!r.ok) throw new Error(`update ${key(i)}: ${r.conflict}`);
    });
    summary = { bench: "kv-writes", records, in_flight: inFlight, bytes, creates, updates };
  } finally {
    await nc.close();
    await nats.stop();
  }
  const lines = [
    `${records} records of ${bytes} B, ${inFlight} in flight, one connection, one nats-server (file storage):`,
    `creates ${(summary["creates"] as { per_s: number }).per_s}/s, updates at the create's revision ${(summary["updates"] as { per_s: number }).per_s}/s`,
  ];
  for (const l of lines) console.log(l);
  if (wantsMarkdown(args))
    await appendSection(
      "KV write ceiling (run records, one nats-server)",
      [
        `date: ${new Date().toISOString()}; machine: ${machine()}`,
        `command: \`npm run bench -- kv-writes --records ${records} --in-flight ${inFlight} --bytes ${bytes}\``,
      ],
      lines,
    );
  console.log(JSON.stringify(summary));
}
