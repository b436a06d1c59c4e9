/**
 * The NATS client's string encoder (nats-encoding.ts): the replacement gives TextEncoder's exact
 * bytes, and nats-core's own encoding paths (protocol lines, headers) go through it.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { headers } from "@nats-io/transport-node";
import { useBufferEncoder } from "../../../src/cluster/nats-encoding.ts";

const require = createRequire(import.meta.url);
const encoders = require(join(dirname(require.resolve("@nats-io/nats-core")), "encoders.js")) as {
  encode(...a: string[]): Uint8Array;
};

describe("nats encoding", () => {
  it("encodes exactly as TextEncoder does (ASCII, multi-byte, astral, lone surrogate, empty, absent)", () => {
    const te = useBufferEncoder();
    const ref = new TextEncoder();
    for (const s of [
      "PUB $JS.API.STREAM.MSG.GET.x _INBOX.a.b 123\r\n",
      "é ü ß 東京 ☃",
      "😀 a𝄞b",
      "a\ud800b",
      "",
    ]) {
      assert.deepEqual([...te.encode(s)], [...ref.encode(s)], JSON.stringify(s));
    }
    assert.deepEqual([...te.encode()], []);
    assert.equal(useBufferEncoder(), te, "installed once");
  });

  it("nats-core's protocol lines and header blocks go through it (pooled Buffers, not fresh ArrayBuffers)", () => {
    useBufferEncoder();
    const line = encoders.encode("PUB a.b 5\r\n");
    assert.ok(Buffer.isBuffer(line), "the protocol line");
    assert.equal(Buffer.from(line).toString("utf8"), "PUB a.b 5\r\n");
    const h = headers();
    h.set("Nats-Expected-Last-Subject-Sequence", "42");
    const block = (h as unknown as { encode(): Uint8Array }).encode();
    assert.ok(Buffer.isBuffer(block), "the header block");
    assert.match(
      Buffer.from(block).toString("utf8"),
      /^NATS\/1\.0\r\nNats-Expected-Last-Subject-Sequence: 42\r\n\r\n$/,
    );
  });
});
