/**
 * `kairos nats-auth <dir>`: generates a secured NATS set-up for an operator — the nats-server
 * `authorization` block (`<dir>/auth.conf`, to `include` in the server config) and one
 * credentials file per user (`<dir>/creds/<user>.json`, mode 0600) for the given cluster names.
 * The same generator `kairos dev` and the tests use (src/dev/nats-auth-files.ts). Run it once,
 * distribute each role's file to its nodes (`--nats-creds`), keep admin's for `kairos admin`.
 */
import type { Command } from "commander";
import { KairosError } from "../lib/errors.ts";
import { writeNatsAuthFiles } from "../dev/nats-auth-files.ts";

const NAME_RE = /^[A-Za-z0-9_-]{1,64}$/;

export function registerNatsAuthCommand(program: Command): void {
  program
    .command("nats-auth <dir>")
    .description("write a NATS authorization block (users per role, least-privilege permissions) and their credentials files")
    .option("--cluster <names>", "Kairos cluster name(s) the users serve, comma-separated", "kairos")
    .option("--workers <ids>", "also one user per worker id (worker-<id>), pinned to that worker's own start/cancel subjects; comma-separated node ids")
    .action((dir: string, f: { cluster: string; workers?: string }) => {
      const clusters = f.cluster.split(",").map((s) => s.trim()).filter(Boolean);
      const bad = clusters.find((c) => !NAME_RE.test(c));
      if (clusters.length === 0 || bad !== undefined) {
        throw new KairosError("invalid_argument", `--cluster: "${bad ?? ""}" must be 1-64 of [A-Za-z0-9_-]`, { field: "cluster" });
      }
      const workers = (f.workers ?? "").split(",").map((s) => s.trim()).filter(Boolean);
      const badWorker = workers.find((w) => !NAME_RE.test(w));
      if (badWorker !== undefined) throw new KairosError("invalid_argument", `--workers: "${badWorker}" must be 1-64 of [A-Za-z0-9_-]`, { field: "workers" });
      const files = writeNatsAuthFiles(dir, clusters, workers);
      console.log(`wrote ${files.configFile} (include it in nats-server's config) and ${Object.keys(files.creds).length} credentials files:`);
      for (const [user, file] of Object.entries(files.creds)) console.log(`  ${user.padEnd(22)} ${file}`);
    });
}
