/**
 * The Nomad job keeps each group's secrets to that group (deploy/nomad/kairos.nomad.hcl, read as
 * text: no Nomad here). A task's workload identity may read its job's variable path and its own
 * group's; so the job's path holds only the public CA, every credential and the cluster key are
 * under `nomad/jobs/kairos/<group>` of the group that renders them, the worker group renders no
 * cluster key, and the scheduler and api groups are constrained off the worker hosts (raw_exec).
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

const hcl = readFileSync(
  new URL("../../../deploy/nomad/kairos.nomad.hcl", import.meta.url),
  "utf8",
);

/** The text of each top-level `group "<name>" { … }` block (comments dropped). */
function groups(text: string): Map<string, string> {
  const out = new Map<string, string>();
  const code = text
    .split("\n")
    .map((l) => l.replace(/^\s*#.*$/, ""))
    .join("\n");
  for (const m of code.matchAll(/^ {2}group "([a-z]+)" \{$/gm)) {
    let depth = 0;
    let end = m.index;
    for (let i = m.index; i < code.length; i++) {
      if (code[i] === "{") depth++;
      else if (code[i] === "}" && --depth === 0) {
        end = i;
        break;
      }
    }
    out.set(m[1]!, code.slice(m.index, end + 1));
  }
  return out;
}

describe("Nomad job: secrets per group", () => {
  const g = groups(hcl);

  it("has the three groups", () => {
    assert.deepEqual([...g.keys()].sort(), ["api", "scheduler", "worker"]);
  });

  it("each group reads only the job's path (the CA) and its own path", () => {
    for (const [name, text] of g) {
      // `{{ .key }}`, or a per-host key: `{{ index . (printf "creds_worker-%s" (env "node.unique.id")) }}`.
      const reads = [
        ...text.matchAll(/nomadVar "([^"]+)" \}\}\{\{ (?:\.(\w+)|index \. \(printf "([\w-]+)%s")/g),
      ].map((m) => [m[1]!, m[2] ?? m[3]!] as const);
      assert.ok(reads.length >= 2, `${name} renders its credentials and the CA`);
      for (const [path, key] of reads) {
        if (path === "nomad/jobs/kairos")
          assert.equal(
            key,
            "nats_ca",
            `${name}: only the CA comes from the job's path, not ${key}`,
          );
        else assert.equal(path, `nomad/jobs/kairos/${name}`, `${name} reads ${path}`);
      }
      // A worker host renders the credentials of its own worker id (`creds_worker-<id>`).
      assert.ok(
        reads.some(
          ([p, k]) =>
            p === `nomad/jobs/kairos/${name}` &&
            (k === "creds" || (name === "worker" && k === "creds_worker-")),
        ),
        `${name} renders its own creds`,
      );
    }
  });

  it("the worker group renders no cluster key; scheduler and api do, from their own paths", () => {
    assert.doesNotMatch(g.get("worker")!, /secret_key|SECRET_KEY/);
    for (const name of ["scheduler", "api"])
      assert.match(
        g.get(name)!,
        new RegExp(`nomadVar "nomad/jobs/kairos/${name}" \\}\\}\\{\\{ \\.secret_key \\}\\}`),
      );
  });

  it("the worker group renders no run-token keys; scheduler and api do, from their own paths", () => {
    assert.doesNotMatch(g.get("worker")!, /run_token_keys|RUN_TOKEN_KEYS/);
    for (const name of ["scheduler", "api"]) {
      assert.match(
        g.get(name)!,
        new RegExp(`nomadVar "nomad/jobs/kairos/${name}" \\}\\}\\{\\{ \\.run_token_keys \\}\\}`),
      );
      assert.match(g.get(name)!, /KAIROS_RUN_TOKEN_KEYS_FILE=/);
    }
  });

  it("scheduler and api never run on a worker host (raw_exec enabled there only)", () => {
    const offWorkerHosts =
      /constraint \{\s*attribute = "\$\{driver\.raw_exec\}"\s*operator\s*= "!="\s*value\s*= "1"\s*\}/;
    for (const name of ["scheduler", "api"]) assert.match(g.get(name)!, offWorkerHosts, name);
    assert.match(
      g.get("worker")!,
      /constraint \{\s*attribute = "\$\{driver\.raw_exec\}"\s*value\s*= "1"\s*\}/,
    );
  });
});
