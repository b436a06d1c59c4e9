/**
 * The image policy (src/sandbox/image-policy.ts): Docker's normalisation of references, each
 * entry kind, ID references refused, and the executor's "the image carries its name" check.
 * Plus the docker lock-down additions that need no engine: VOLUME tmpfs overlays, ulimits,
 * and the seccomp verdict on `docker info` SecurityOptions.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { checkImage, imageCarriesName, parseImagePolicy, parseImageRef } from "../../../src/sandbox/image-policy.ts";
import { imageVolumes, tmpfsMounts, ulimits } from "../../../src/sandbox/docker-spec.ts";
import { resolveExecutorOptions } from "../../../src/sandbox/options.ts";
import { seccompProblem } from "../../../src/sandbox/executor.ts";
import { isKairosError } from "../../../src/lib/errors.ts";

const SHA = `sha256:${"a".repeat(64)}`;

describe("image references", () => {
  it("normalises like Docker: docker.io, library/, :latest", () => {
    assert.deepEqual(parseImageRef("busybox"), { registry: "docker.io", path: "library/busybox", tag: "latest", digest: undefined });
    assert.deepEqual(parseImageRef("docker.io/library/busybox:latest"), parseImageRef("busybox"));
    assert.deepEqual(parseImageRef("index.docker.io/busybox"), parseImageRef("busybox"));
    assert.deepEqual(parseImageRef("kairos-test/busybox:1"), { registry: "docker.io", path: "kairos-test/busybox", tag: "1", digest: undefined });
    assert.deepEqual(parseImageRef("localhost:5000/a/b"), { registry: "localhost:5000", path: "a/b", tag: "latest", digest: undefined });
    assert.deepEqual(parseImageRef(`reg.example.com/t/app@${SHA}`), { registry: "reg.example.com", path: "t/app", tag: undefined, digest: SHA });
  });

  it("refuses image IDs and malformed names", () => {
    for (const bad of ["4f2a9b1c0d3e", SHA, "UPPER/case", "a//b", "x:bad tag", "x@sha256:zz", ""]) {
      assert.equal(typeof parseImageRef(bad), "string", bad);
    }
  });
});

describe("image policy", () => {
  const policy = parseImagePolicy(["reg.example.com/team-a/", "kairos-test/", `docker.io/library/alpine@${SHA}`, "busybox:1.36"]);
  const allowed = (image: string) => checkImage(policy, image) === undefined;

  it("allows images under a prefix, by whole path components", () => {
    assert.ok(allowed("reg.example.com/team-a/app:1"));
    assert.ok(allowed("reg.example.com/team-a/sub/app"));
    assert.ok(allowed("kairos-test/busybox:1"));
    assert.ok(allowed("docker.io/kairos-test/busybox:1"));
    assert.ok(!allowed("reg.example.com/team-ab/app:1"), "prefix is component-wise");
    assert.ok(!allowed("reg.example.com/team-a:1"), "the namespace itself is not under it");
    assert.ok(!allowed("evil.example.com/team-a/app"));
  });

  it("allows exact digests and exact tags only", () => {
    assert.ok(allowed(`alpine@${SHA}`));
    assert.ok(!allowed(`alpine@sha256:${"b".repeat(64)}`));
    assert.ok(!allowed("alpine"));
    assert.ok(allowed("busybox:1.36"));
    assert.ok(allowed("docker.io/library/busybox:1.36"));
    assert.ok(!allowed("busybox"));
    assert.ok(!allowed("busybox:1.37"));
  });

  it("answers policy_denied naming the field and the allowed entries; malformed refs are invalid_argument", () => {
    const e = checkImage(policy, "other/image:1");
    assert.ok(isKairosError(e, "policy_denied"));
    assert.equal(e.field, "task.image");
    assert.match(e.message, /not allowed for this tenant \(allowed: reg\.example\.com\/team-a\//);
    assert.ok(isKairosError(checkImage(policy, "4f2a9b1c0d3e"), "invalid_argument"), "an image ID is refused under a policy");
  });

  it('"*" allows anything, even what does not parse (the pre-policy behaviour)', () => {
    assert.equal(checkImage(parseImagePolicy(["*"]), "4f2a"), undefined);
  });

  it("rejects bad policies with invalid_argument", () => {
    for (const bad of [[], ["UPPER/"], ["x@sha256:1"], Array.from({ length: 65 }, () => "*")]) {
      assert.throws(() => parseImagePolicy(bad), (e: unknown) => isKairosError(e, "invalid_argument"), JSON.stringify(bad).slice(0, 80));
    }
    assert.deepEqual(parseImagePolicy(["reg.example.com/"]).entries, [{ kind: "prefix", prefix: "reg.example.com/" }]);
    assert.deepEqual(parseImagePolicy(["docker.io/library/"]).entries, [{ kind: "prefix", prefix: "docker.io/library/" }]);
  });

  it("an inspected image carries its name only through RepoTags/RepoDigests (not an ID prefix)", () => {
    assert.ok(imageCarriesName("busybox", ["busybox:latest"], []));
    assert.ok(imageCarriesName("docker.io/kairos-test/busybox:1", ["kairos-test/busybox:1"], null));
    assert.ok(imageCarriesName(`alpine@${SHA}`, [], [`alpine@${SHA}`]));
    assert.ok(!imageCarriesName("4f2a", ["other-tenant/app:1"], []), "an ID prefix resolves to another name");
    assert.ok(!imageCarriesName("busybox:2", ["busybox:latest"], []));
    assert.ok(!imageCarriesName("x", [], []));
  });
});

describe("docker lock-down additions", () => {
  const cfg = resolveExecutorOptions({ workerId: "w", docker: { volumeTmpfsSizeMb: 4, nofileLimit: 256, maxImageVolumes: 2 } }).docker;

  it("lays a bounded tmpfs over every image VOLUME path", () => {
    assert.deepEqual(tmpfsMounts(cfg, ["/data", "/var/lib/x/", "/tmp"]), {
      "/tmp": "rw,noexec,nosuid,nodev,size=16m,mode=1777",
      "/data": "rw,noexec,nosuid,nodev,size=4m",
      "/var/lib/x": "rw,noexec,nosuid,nodev,size=4m",
    });
  });

  it("refuses images with more VOLUME paths than the node allows, or odd ones", () => {
    assert.deepEqual(imageVolumes({ "/a": {}, "/b": {} }, "img", cfg), ["/a", "/b"]);
    const many = imageVolumes({ "/a": {}, "/b": {}, "/c": {} }, "img", cfg);
    assert.ok(!Array.isArray(many) && many.class === "invalid_task");
    const odd = imageVolumes({ "/a:b": {} }, "img", cfg);
    assert.ok(!Array.isArray(odd) && odd.class === "invalid_task");
  });

  it("sets nofile and core ulimits", () => {
    assert.deepEqual(ulimits(cfg), [{ Name: "nofile", Soft: 256, Hard: 256 }, { Name: "core", Soft: 0, Hard: 0 }]);
  });

  it("accepts only engines that apply a seccomp profile", () => {
    assert.equal(seccompProblem(["name=seccomp,profile=default"]), undefined);
    assert.equal(seccompProblem(["name=apparmor", "name=seccomp,profile=builtin", "name=cgroupns"]), undefined);
    assert.match(seccompProblem(["name=seccomp,profile=unconfined"]) ?? "", /unconfined/);
    assert.match(seccompProblem(["name=apparmor"]) ?? "", /no seccomp/);
    assert.match(seccompProblem(undefined) ?? "", /no seccomp/);
  });
});
