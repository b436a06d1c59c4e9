/**
 * The list commands' paging (src/cli/pages.ts) against a fake API that answers short pages with
 * cursors, as a filtered list does: one page is filled from the next ones, each asked for what is
 * missing, up to its size or the end, at most MAX_FILL_REQUESTS requests; `--all` goes on to the
 * end; a full first page is one request.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { MAX_FILL_REQUESTS, walkPages, type PageFlags } from "../../src/cli/pages.ts";
import type { CliContext } from "../../src/cli/api-command.ts";

const ctx: CliContext = {
  io: { out: () => undefined, err: () => undefined, env: {}, readStdin: async () => "" },
  exitCode: 0,
  settled: false,
  sleep: async () => undefined,
};

/** A list of `total` items that answers at most `perPage` matches per request. */
function api(total: number, perPage: number) {
  const asked: { limit?: number; cursor?: string }[] = [];
  const read = async (p: { limit?: number; cursor?: string }) => {
    asked.push(p);
    const from = p.cursor === undefined ? 0 : Number(p.cursor);
    const n = Math.min(perPage, p.limit ?? 50, total - from);
    const items = Array.from({ length: n }, (_, i) => from + i);
    const end = from + n;
    return { items, next_cursor: end < total ? String(end) : null };
  };
  return { asked, read };
}

const walk = (f: PageFlags, a: ReturnType<typeof api>) =>
  walkPages(ctx, f, a.read, (p) => p.items, "items");

describe("kairos list paging", () => {
  it("fills a short page from the next ones, asking each for what is missing", async () => {
    const a = api(100, 7);
    const r = await walk({ limit: "20" }, a);
    assert.deepEqual(
      r.items,
      Array.from({ length: 20 }, (_, i) => i),
    );
    assert.equal(r.next_cursor, "20");
    assert.deepEqual(
      a.asked.map((p) => p.limit),
      [20, 13, 6],
    );
  });

  it("stops at the end, and after MAX_FILL_REQUESTS requests with the cursor to go on from", async () => {
    const end = api(10, 3);
    assert.deepEqual((await walk({}, end)).items.length, 10);
    const sparse = api(10_000, 1);
    const r = await walk({ limit: "200" }, sparse);
    assert.equal(sparse.asked.length, MAX_FILL_REQUESTS);
    assert.equal(r.items.length, MAX_FILL_REQUESTS);
    assert.equal(r.next_cursor, String(MAX_FILL_REQUESTS));
  });

  it("a full first page is one request; --all reads to the end", async () => {
    const a = api(500, 200);
    assert.equal((await walk({ limit: "50" }, a)).items.length, 50);
    assert.equal(a.asked.length, 1);
    const b = api(500, 60);
    const all = await walk({ all: true }, b);
    assert.equal(all.items.length, 500);
    assert.equal(all.next_cursor, null);
  });
});
