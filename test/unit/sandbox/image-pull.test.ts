/**
 * The pure parts of pulling (src/sandbox/docker-image.ts, docker-errors.ts, image-policy.ts): when
 * an attempt must pull under each policy — in particular that a registry's image on the host is
 * pulled again for a tenant that has not pulled it — which digest an image has in a repository, how
 * pull failures are classified for the tenant, and registry hosts as credentials name them.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type Dockerode from "dockerode";
import { mustPull, repoDigestOf } from "../../../src/sandbox/docker-image.ts";
import { classifyPullFailure } from "../../../src/sandbox/docker-errors.ts";
import { parseImageRef, parseRegistry, type ImageRef } from "../../../src/sandbox/image-policy.ts";

const D1 = `sha256:${"1".repeat(64)}`;
const D2 = `sha256:${"2".repeat(64)}`;
const ref = (s: string): ImageRef => parseImageRef(s) as ImageRef;
const info = (repoDigests: string[]): Dockerode.ImageInspectInfo =>
  ({ Id: "sha256:x", RepoDigests: repoDigests }) as unknown as Dockerode.ImageInspectInfo;

describe("pull decisions", () => {
  it("never pulls under never; always under always; if_missing when absent", () => {
    const r = ref("127.0.0.1:5000/team/app:1");
    assert.equal(mustPull("never", null, r, false), false);
    assert.equal(mustPull("always", info([]), r, true), true);
    assert.equal(mustPull("if_missing", null, r, false), true);
  });

  it("if_missing: a registry's image on the host is pulled again unless this tenant pulled it", () => {
    const r = ref("127.0.0.1:5000/team/app:1");
    const fromRegistry = info([`127.0.0.1:5000/team/app@${D1}`]);
    assert.equal(mustPull("if_missing", fromRegistry, r, false), true);
    assert.equal(mustPull("if_missing", fromRegistry, r, true), false);
    // Built or imported here, or from another repository only: the operator's, run as it is.
    assert.equal(mustPull("if_missing", info([]), r, false), false);
    assert.equal(mustPull("if_missing", info([`127.0.0.1:5000/other/app@${D1}`]), r, false), false);
  });

  it("finds the digest of an image in the task's repository, normalised", () => {
    assert.equal(
      repoDigestOf([`other/x@${D2}`, `busybox@${D1}`], ref("docker.io/library/busybox:1")),
      D1,
    );
    assert.equal(repoDigestOf([`busybox@${D1}`], ref("127.0.0.1:5000/busybox:1")), undefined);
    assert.equal(repoDigestOf(null, ref("busybox")), undefined);
  });
});

describe("pull failures as the tenant sees them", () => {
  const f = (message: string, status?: number, withCredential = false) =>
    classifyPullFailure(
      { message, status, registry: "r.example.com", withCredential },
      "r.example.com/a:1",
    );

  it("unauthorized: not retryable, saying whether the tenant had a credential", () => {
    const none = f('Head "https://r.example.com/v2/a/manifests/1": no basic auth credentials', 500);
    assert.equal(none.class, "image_unauthorized");
    assert.equal(none.retryable, false);
    assert.match(none.message, /this tenant has none for it/);
    const wrong = f("unauthorized: authentication required", undefined, true);
    assert.equal(wrong.class, "image_unauthorized");
    assert.match(wrong.message, /refused this tenant's credentials/);
    assert.equal(
      f("denied: requested access to the resource is denied", 404).class,
      "image_unauthorized",
    );
  });

  it("not found: not retryable; unreachable: retryable; never the engine's words", () => {
    const nf = f(
      "manifest for r.example.com/a:1 not found: manifest unknown: manifest unknown",
      404,
    );
    assert.equal(nf.class, "image_not_found");
    assert.equal(nf.retryable, false);
    const down = f(
      'Get "http://r.example.com/v2/": dial tcp 10.1.2.3:443: connect: connection refused',
      500,
    );
    assert.equal(down.class, "registry_unreachable");
    assert.equal(down.retryable, true);
    assert.ok(!down.message.includes("10.1.2.3"), "no engine text for the tenant");
    assert.equal(
      f("Docker engine did not answer pull of x within 600000 ms").class,
      "registry_unreachable",
    );
    const other = f("received unexpected HTTP status: 502 Bad Gateway", 500);
    assert.equal(other.class, "executor_failure");
    assert.equal(other.retryable, true);
  });
});

describe("registry hosts", () => {
  it("normalises Docker Hub's names and refuses what is not a host", () => {
    assert.equal(parseRegistry("index.docker.io"), "docker.io");
    assert.equal(parseRegistry("127.0.0.1:5000"), "127.0.0.1:5000");
    assert.equal(parseRegistry("[::1]:5000"), "[::1]:5000");
    for (const bad of [
      "",
      "https://r.example.com",
      "r.example.com/team",
      "r.example.com:99999",
      "a b",
    ])
      assert.throws(() => parseRegistry(bad), /registry/, bad);
  });
});
