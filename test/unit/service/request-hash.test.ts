/**
 * The request hash's canonical JSON (request-hash.ts): its key order is `localeCompare`'s, which
 * hashes stored with Idempotency-Keys depend on — pinned against it on drawn keys (env names:
 * case, underscores, digits) and by one golden hash.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { canonical, keyOrdersKept, sha256 } from "../../../src/service/request-hash.ts";

describe("canonical", () => {
  it("orders keys as localeCompare does", () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.stringMatching(/^[A-Za-z_0-9é-]{1,6}$/), { maxLength: 12 }),
        (keys) => {
          const obj = Object.fromEntries(keys.map((k, i) => [k, i]));
          const want = [...keys].sort((a, b) => a.localeCompare(b));
          assert.equal(
            canonical(obj),
            `{${want.map((k) => `${JSON.stringify(k)}:${obj[k]}`).join(",")}}`,
          );
        },
      ),
      { numRuns: 2_000 },
    );
  });

  it("orders each object by its own keys when key lists join alike", () => {
    // Both join as "a\0\0b": the order sorted for the first must not be used for the second.
    const first = { "a\u0000": 1, b: 2 };
    const second = { a: 1, "\u0000b": 2 };
    for (const obj of [first, second, first, second]) {
      const want = Object.keys(obj).sort((x, y) => x.localeCompare(y));
      assert.equal(
        canonical(obj),
        `{${want.map((k) => `${JSON.stringify(k)}:${JSON.stringify(obj[k as keyof typeof obj])}`).join(",")}}`,
      );
    }
  });

  it("hashes a spec as it always has", () => {
    const spec = {
      name: "nightly",
      schedule: { cron: "0 3 * * *", timezone: "Europe/Paris" },
      task: { image: "busybox", args: ["true"], env: { B_X: "1", BX: "2", a: "3" }, timeout_s: 10 },
      enabled: true,
    };
    assert.equal(
      canonical(spec),
      '{"enabled":true,"name":"nightly","schedule":{"cron":"0 3 * * *","timezone":"Europe/Paris"},"task":{"args":["true"],"env":{"a":"3","B_X":"1","BX":"2"},"image":"busybox","timeout_s":10}}',
    );
    assert.equal(sha256(canonical(spec)).length, 64);
  });
});

describe("canonical: the cache of key orders", () => {
  it("keeps a spec's small shapes, never a client's large map (its bytes would be pinned)", () => {
    const big = Object.fromEntries(
      Array.from({ length: 64 }, (_, i) => [`K${i}_${"x".repeat(64)}`, i]),
    );
    const before = keyOrdersKept();
    canonical({ env: big });
    canonical({ env: { ...big, EXTRA: 1 } });
    assert.ok(keyOrdersKept() - before <= 1, "only the small outer shape { env } is kept");
    assert.equal(canonical({ b: 1, a: 2 }), '{"a":2,"b":1}');
  });
});
