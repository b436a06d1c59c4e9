/**
 * What several benchmarks share (not a benchmark itself: it exports no `run`): their options —
 * `--<name> <positive integer>` and `--no-md` (do not append the results to BENCHMARKS.md) — and
 * the quantile of a latency sample.
 */

/** The value of `--<name>` in `args`, a positive integer; `dflt` when absent. */
export function intOption(args: readonly string[], name: string, dflt: number): number {
  const i = args.indexOf(`--${name}`);
  if (i < 0) return dflt;
  const v = Number(args[i + 1]);
  if (!Number.isInteger(v) || v < 1)
    throw new Error(`--${name} must be a positive integer, got ${args[i + 1]}`);
  return v;
}

/** Whether the results go into BENCHMARKS.md (unless `--no-md`). */
export function wantsMarkdown(args: readonly string[]): boolean {
  return !args.includes("--no-md");
}

/**
 * The `p` quantile (0..1) of an ascending sample: its element at ⌊p·n⌋ (the largest for p = 1);
 * 0 for an empty sample.
 */
export function quantile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

/** A JSON caller of the API at `url` with a tenant's key: throws on any status ≥ 300, with its body. */
export function apiCaller(url: string, apiKey: string) {
  return async <T = unknown>(method: string, path: string, body?: unknown): Promise<T> => {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${apiKey}`,
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    if (res.status >= 300)
      throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 300)}`);
    return JSON.parse(text) as T;
  };
}
