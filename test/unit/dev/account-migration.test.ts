/** A dev folder's streams move from the global account to KAIROS once, never over existing data. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { moveGlobalAccountStreams } from "../../../src/dev/account-migration.ts";

describe("dev data: global account → KAIROS", () => {
  it("moves $G's streams when KAIROS has none, and only then", () => {
    const d = mkdtempSync(join(tmpdir(), "kairos-mig-"));
    try {
      assert.equal(moveGlobalAccountStreams(d), false, "nothing to move");
      mkdirSync(join(d, "jetstream", "$G", "streams", "KV_kairos_tenants"), { recursive: true });
      writeFileSync(join(d, "jetstream", "$G", "streams", "KV_kairos_tenants", "meta.inf"), "x");
      assert.equal(moveGlobalAccountStreams(d), true);
      assert.equal(
        readFileSync(
          join(d, "jetstream", "KAIROS", "streams", "KV_kairos_tenants", "meta.inf"),
          "utf8",
        ),
        "x",
      );
      assert.ok(!existsSync(join(d, "jetstream", "$G")));
      mkdirSync(join(d, "jetstream", "$G"), { recursive: true });
      assert.equal(moveGlobalAccountStreams(d), false, "KAIROS has data: never overwritten");
      assert.ok(existsSync(join(d, "jetstream", "$G")));
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });
});
