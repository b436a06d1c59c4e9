/**
 * A faster string encoder for the NATS client. nats-core encodes every protocol line (`PUB …`)
 * and every header block (JetStream's expected-revision header on each KV write) with
 * `TextEncoder.encode`, which in Node allocates a fresh ArrayBuffer per call: 8–10 % of a
 * scheduler's CPU in a 200,000-run burst (profile in BENCHMARKS.md), plus the garbage collection
 * of those backing stores. `Buffer.from(s, "utf8")` gives the same bytes in a view of Node's
 * shared pool, about 4× faster for such short strings (nodejs/node#50485).
 *
 * nats-core's encoders module reads its `TE` export at each call (`encoders_1.TE.encode`), so
 * replacing that export reaches every caller (protocol lines, headers, payload strings). The
 * module is found from the package's own entry point, so it is the instance the client loaded.
 *
 * Gotcha: the bytes are a view into a shared slab (offset ≠ 0). nats-core only copies them
 * (`Uint8Array.set`) or writes them to the socket, never reads `.buffer` of them; the
 * conformance test in test/unit/cluster/nats-encoding.test.ts checks the bytes against
 * TextEncoder's, and every integration test runs through it.
 */
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

interface Encoders {
  TE: { encode(s?: string): Uint8Array; encodeInto?: (s: string, into: Uint8Array) => { read: number; written: number }; readonly encoding: string };
}

const textEncoder = new TextEncoder();
const fast = {
  encoding: "utf-8",
  encode: (s = ""): Uint8Array => Buffer.from(s, "utf8"),
  encodeInto: (s: string, into: Uint8Array) => textEncoder.encodeInto(s, into),
} as const;

let encoders: Encoders | undefined;

/** Makes nats-core encode strings with `Buffer.from` (idempotent). Returns the module's encoder. */
export function useBufferEncoder(): Encoders["TE"] {
  if (!encoders) {
    const require = createRequire(import.meta.url);
    encoders = require(join(dirname(require.resolve("@nats-io/nats-core")), "encoders.js")) as Encoders;
    encoders.TE = fast;
  }
  return encoders.TE;
}
