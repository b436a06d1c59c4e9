/**
 * When each run's outcome became visible through the API: the time its terminal record was
 * stored (the runs bucket's message timestamp, set by the server) minus its last attempt's end
 * (the worker's clock, same machine). Read after the run from the stream itself with an ordered
 * consumer — no watcher runs during the measured burst. The first terminal revision per run
 * counts; runs that did not end are left out.
 */
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { decode } from "../src/cluster/codec.ts";
import { TERMINAL, type RunView } from "../src/protocol/model.ts";

/** The end of a record's last attempt in ms, or undefined. */
export function endedAtMs(r: RunView): number | undefined {
  const a = r.attempts.at(-1);
  const at = a?.finished_at ?? null;
  return at === null ? undefined : Date.parse(at);
}

/** Settle times (ms), one per run that ended, from the runs bucket's stream (`KV_<bucket>`). */
export async function settledTimes(nc: NatsConnection, bucket: string): Promise<number[]> {
  const stream = `KV_${bucket}`;
  const last = (await (await jetstreamManager(nc)).streams.info(stream)).state.last_seq;
  if (last === 0) return [];
  const consumer = await jetstream(nc).consumers.get(stream, {
    filter_subjects: `$KV.${bucket}.>`,
  });
  const seen = new Set<string>();
  const out: number[] = [];
  const msgs = await consumer.consume({ max_messages: 10_000 });
  for await (const m of msgs) {
    // Run records only: their keys start with the partition number (`ix.`, `dl.`, `ob.` do not).
    if (m.data.length > 0 && /^\d+$/.test(m.subject.split(".")[2] ?? "")) {
      let r: RunView | undefined;
      try {
        r = decode<RunView>(m.data);
      } catch {
        r = undefined; // not a run record (an index chunk, a dead letter)
      }
      if (r && typeof r.run_id === "string" && TERMINAL.has(r.status) && !seen.has(r.run_id)) {
        seen.add(r.run_id);
        const end = endedAtMs(r);
        if (end !== undefined) out.push(Math.round(Number(m.info.timestampNanos) / 1e6) - end);
      }
    }
    if (m.seq >= last) break;
  }
  msgs.stop();
  return out.sort((a, b) => a - b);
}
