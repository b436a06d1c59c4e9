/**
 * The read-modify-write helper over the in-memory KV (which passes the KV conformance suite):
 * create when absent, update at the revision read, decide again after a concurrent change, stop
 * without writing, the typed conflict after the last try, and the pause between tries.
 */
import { it } from "node:test";
import assert from "node:assert/strict";
import { decode, encode } from "../../../src/cluster/codec.ts";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { casUpdate, type CasStep } from "../../../src/lib/cas-update.ts";
import { isKairosError } from "../../../src/lib/errors.ts";

interface Count {
  n: number;
}
const codec = { encode: (v: Count) => encode(v), decode: (b: Uint8Array) => decode<Count>(b) };
const increment = (c: Count | null): CasStep<Count, number> => {
  const n = (c?.n ?? 0) + 1;
  return { write: { n }, result: n };
};
const read = async (kv: MemoryKv, key: string) => decode<Count>((await kv.get(key))!.value).n;

it("creates an absent key, then updates it at the revision read", async () => {
  const kv = new MemoryKv();
  assert.equal(
    await casUpdate(kv, "c", increment, { attempts: 3, ...codec, conflictMessage: "busy" }),
    1,
  );
  assert.equal(
    await casUpdate(kv, "c", increment, { attempts: 3, ...codec, conflictMessage: "busy" }),
    2,
  );
  assert.equal(await read(kv, "c"), 2);
});

it("decides again from the new value after a concurrent change, never overwriting it", async () => {
  const kv = new MemoryKv();
  await kv.create("c", encode({ n: 10 }));
  const seen: (number | null)[] = [];
  const pauses: number[] = [];
  const r = await casUpdate(
    kv,
    "c",
    async (c) => {
      seen.push(c?.n ?? null);
      // Another writer lands between this read and this write, twice.
      if (seen.length <= 2) {
        const e = (await kv.get("c"))!;
        assert.ok(
          (await kv.update("c", encode({ n: decode<Count>(e.value).n + 100 }), e.revision)).ok,
        );
      }
      return increment(c);
    },
    { attempts: 5, ...codec, conflictMessage: "busy", pause: async (i) => void pauses.push(i) },
  );
  assert.deepEqual(seen, [10, 110, 210]);
  assert.equal(r, 211);
  assert.equal(await read(kv, "c"), 211);
  assert.deepEqual(pauses, [0, 1]);
});

it("a racing create of an absent key is a conflict: the next try updates what the other created", async () => {
  const kv = new MemoryKv();
  let first = true;
  const r = await casUpdate(
    kv,
    "c",
    async (c) => {
      if (first) {
        first = false;
        assert.ok((await kv.create("c", encode({ n: 5 }))).ok);
      }
      return increment(c);
    },
    { attempts: 2, ...codec, conflictMessage: "busy" },
  );
  assert.equal(r, 6);
  assert.equal(await read(kv, "c"), 6);
});

it("stops without writing when the decision is done, and lets the decision's error through", async () => {
  const kv = new MemoryKv();
  await kv.create("c", encode({ n: 1 }));
  const before = (await kv.get("c"))!.revision;
  assert.equal(
    await casUpdate(kv, "c", (c) => ({ done: c?.n ?? -1 }), {
      attempts: 1,
      ...codec,
      conflictMessage: "busy",
    }),
    1,
  );
  await assert.rejects(
    casUpdate(
      kv,
      "c",
      () => {
        throw new Error("over quota");
      },
      { attempts: 3, ...codec, conflictMessage: "busy" },
    ),
    /over quota/,
  );
  assert.equal((await kv.get("c"))!.revision, before);
});

it("gives up with a retryable conflict after `attempts` tries, each met by a concurrent change", async () => {
  const kv = new MemoryKv();
  await kv.create("c", encode({ n: 0 }));
  let tries = 0;
  await assert.rejects(
    casUpdate(
      kv,
      "c",
      async (c) => {
        tries++;
        await kv.put("c", encode({ n: 1_000 + tries }));
        return increment(c);
      },
      { attempts: 4, ...codec, conflictMessage: "the count kept changing" },
    ),
    (e: unknown) =>
      isKairosError(e, "conflict") && e.retryable && e.message === "the count kept changing",
  );
  assert.equal(tries, 4);
  assert.equal(await read(kv, "c"), 1_004);
});
