/**
 * The paused index over the in-memory KV: the cases of test/support/job-lists-suite.ts, which
 * test/integration/job-catalog.test.ts runs over JetStream KV.
 */
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { describePausedIndex } from "../../support/job-lists-suite.ts";

describePausedIndex("the in-memory KV", () =>
  Promise.resolve({ tenants: new MemoryKv("tenants"), actors: new MemoryKv("actors") }),
);
