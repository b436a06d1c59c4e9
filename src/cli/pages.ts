/**
 * Paging for the list commands: `--limit` and `--cursor` ask for one page, as the API does;
 * `--all` follows `next_cursor` until the last page, up to `MAX_ALL_ITEMS` items (then it stops
 * with a `next_cursor` to go on from, and says so on stderr). A filtered list may answer a short
 * page with a `next_cursor` (the API examines a bounded number of items per request): one page
 * is then filled up from the next ones, asking each for what is missing, at most
 * `MAX_FILL_REQUESTS` requests.
 */
import type { Command } from "commander";
import { KairosError } from "../lib/errors.ts";
import { retryingRead, type CliContext } from "./api-command.ts";

export interface PageFlags {
  limit?: string;
  cursor?: string;
  all?: boolean;
}

/** Most items `--all` collects (a tenant has at most its max_jobs quota of jobs). */
export const MAX_ALL_ITEMS = 100_000;
/** The page size `--all` asks for (the API's most). */
const ALL_PAGE = 200;
/** The page size the API answers without `limit`. */
const DEFAULT_PAGE = 50;
/** Most requests made to fill one short page. */
export const MAX_FILL_REQUESTS = 100;

export function pageFlags(cmd: Command): Command {
  return cmd
    .option("--limit <n>", "items per page, 1-200 (default 50)")
    .option("--cursor <cursor>", "the page after the one that printed it")
    .option("--all", `every page (at most ${MAX_ALL_ITEMS} items)`);
}

/** The page options the flags ask for; `--limit` must be a whole number (the API checks its range). */
function firstPage(f: PageFlags): { limit?: number; cursor?: string } {
  let limit: number | undefined;
  if (f.limit !== undefined) {
    if (!/^\d{1,6}$/.test(f.limit.trim()))
      throw new KairosError(
        "invalid_argument",
        `--limit: must be a whole number 1-200, got ${JSON.stringify(f.limit)}`,
        {
          field: "--limit",
        },
      );
    limit = Number(f.limit.trim());
  }
  return {
    ...(limit !== undefined ? { limit } : f.all ? { limit: ALL_PAGE } : {}),
    ...(f.cursor !== undefined ? { cursor: f.cursor } : {}),
  };
}

/** One page, or with `--all` every page from the first (or `--cursor`) on. */
export async function walkPages<P extends { next_cursor: string | null }, T>(
  ctx: CliContext,
  f: PageFlags,
  read: (p: { limit?: number; cursor?: string }) => Promise<P>,
  itemsOf: (page: P) => readonly T[],
  noun: string,
): Promise<{ items: T[]; next_cursor: string | null }> {
  let p = firstPage(f);
  const want = p.limit ?? DEFAULT_PAGE;
  const items: T[] = [];
  for (let requests = 1; ; requests++) {
    const q = p;
    const page = await retryingRead(ctx, () => read(q));
    items.push(...itemsOf(page));
    const next = page.next_cursor;
    if (next === null) return { items, next_cursor: next };
    if (!f.all) {
      if (items.length >= want || requests >= MAX_FILL_REQUESTS)
        return { items, next_cursor: next };
      p = { ...p, cursor: next, limit: want - items.length };
      continue;
    }
    if (items.length >= MAX_ALL_ITEMS) {
      ctx.io.err(`--all: stopped after ${items.length} ${noun}; go on with --cursor ${next}\n`);
      return { items, next_cursor: next };
    }
    p = { ...p, cursor: next };
  }
}
