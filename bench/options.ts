/**
 * What several benchmarks share (not a benchmark itself: it exports no `run`): their options —
 * `--<name> <positive integer>` and `--no-md` (do not append the results to BENCHMARKS.md) — and
 * the quantile of a latency sample.
 */

import http from "node:http";

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

/**
 * A JSON caller of the API at `url` with a tenant's key: throws on any status ≥ 300, with its body.
 * Through `node:http` on kept-alive connections, not `fetch`: on the 2-core benchmark machine the
 * client shares the CPU with the node it measures, and `fetch` (web streams, an abort signal and a
 * Request per call) cost the client about as much CPU per create as the node spent making it.
 */
export function apiCaller(url: string, apiKey: string) {
  const base = new URL(url);
  const agent = new http.Agent({ keepAlive: true });
  return <T = unknown>(method: string, path: string, body?: unknown): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const data = body !== undefined ? JSON.stringify(body) : undefined;
      const req = http.request(
        {
          agent,
          host: base.hostname,
          port: base.port,
          method,
          path,
          headers: {
            authorization: `Bearer ${apiKey}`,
            ...(data !== undefined
              ? { "content-type": "application/json", "content-length": Buffer.byteLength(data) }
              : {}),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("error", reject);
          res.on("end", () => {
            const text = Buffer.concat(chunks).toString("utf8");
            const status = res.statusCode ?? 0;
            if (status >= 300)
              reject(new Error(`${method} ${path}: ${status} ${text.slice(0, 300)}`));
            else {
              try {
                resolve(JSON.parse(text) as T);
              } catch (e) {
                reject(e instanceof Error ? e : new Error(String(e)));
              }
            }
          });
        },
      );
      req.on("error", reject);
      req.end(data);
    });
}
