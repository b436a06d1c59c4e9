/**
 * The codec: msgpack round trips, and msgpackr's native string extraction stays off in every
 * module a node loads (its sliced strings kept whole messages alive per job state: codec.ts).
 */
import { it } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { decode, encode } from "../../../src/cluster/codec.ts";

it("round-trips what Kairos sends and stores", () => {
  const v = {
    kind: "create",
    tenant_id: "t_1",
    n: 3,
    big: 2 ** 40,
    none: null,
    list: ["é", "x".repeat(300)],
    nested: { ok: true },
  };
  assert.deepEqual(decode(encode(v)), v);
});

it("no module of a node turns msgpackr's native string extraction on", () => {
  // A child process loads the modules behind `kairos node`, `kairos dev` and `kairos admin`, then asks msgpackr.
  const script = `
    for (const m of ["./src/server/start.ts", "./src/cli/node.ts", "./src/cli/dev.ts", "./src/cli/admin.ts", "./src/nats-api/service.ts"]) await import(m);
    const m = await import("msgpackr/pack");
    process.stdout.write(String(m.isNativeAccelerationEnabled));`;
  const out = execFileSync(
    process.execPath,
    ["--import", "tsx", "--input-type=module", "-e", script],
    { cwd: new URL("../../../", import.meta.url), encoding: "utf8" },
  );
  assert.equal(
    out.trim().split("\n").at(-1),
    "false",
    "a module imports msgpackr's Node entry (use msgpackr/pack)",
  );
});
