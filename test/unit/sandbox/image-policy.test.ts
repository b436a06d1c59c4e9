/**
 * The image policy (src/sandbox/image-policy.ts): Docker's normalisation of references, each
 * entry kind, ID references refused, and the executor's "the image carries its name" check.
 * Plus the docker lock-down additions that need no engine: VOLUME tmpfs overlays, ulimits,
 * and the seccomp verdict on `docker info` SecurityOptions.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  checkImage,
  imageCarriesName,
  parseImagePolicy,
  parseImageRef,
} from "../../../src/sandbox/image-policy.ts";
import { imageVolumes, tmpfsMounts, ulimits } from "../../../src/sandbox/docker-spec.ts";
import { resolveExecutorOptions } from "../../../src/sandbox/options.ts";
import { seccompProblem } from "../../../src/sandbox/executor.ts";
import { isKairosError } from "../../../src/lib/errors.ts";

const SHA = `sha256:${"a".repeat(64)}`;

describe("image references", () => {
  it("normalises like Docker: docker.io, library/, :latest", () => {
    assert.deepEqual(parseImageRef("busybox"), {
      registry: "docker.io",
      path: "library/busybox",
      tag: "latest",
      digest: undefined,
    });
    assert.deepEqual(parseImageRef("docker.io/library/busybox:latest"), parseImageRef("busybox"));
    assert.deepEqual(parseImageRef("index.docker.io/busybox"), parseImageRef("busybox"));
    assert.deepEqual(parseImageRef("kairos-test/busybox:1"), {
      registry: "docker.io",
      path: "kairos-test/busybox",
      tag: "1",
      digest: undefined,
    });
    assert.deepEqual(parseImageRef("localhost:5000/a/b"), {
      registry: "localhost:5000",
      path: "a/b",
      tag: "latest",
      digest: undefined,
    });
    assert.deepEqual(parseImageRef(`reg.example.com/t/app@${SHA}`), {
      registry: "reg.example.com",
      path: "t/app",
      tag: undefined,
      digest: SHA,
    });
  });

  it("refuses image IDs and malformed names", () => {
    for (const bad of ["4f2a9b1c0d3e", SHA, "UPPER/case", "a//b", "x:bad tag", "x@sha256:zz", ""]) {
      assert.equal(typeof parseImageRef(bad), "string", bad);
    }
  });

  it("follows the reference grammar: host[:port]/path[:tag][@digest], IPv6 hosts bracketed", () => {
    assert.deepEqual(parseImageRef("127.0.0.1:2375/x"), {
      registry: "127.0.0.1:2375",
      path: "x",
      tag: "latest",
      digest: undefined,
    });
    assert.deepEqual(parseImageRef("[::1]:5000/a/b:1"), {
      registry: "[::1]:5000",
      path: "a/b",
      tag: "1",
      digest: undefined,
    });
    assert.deepEqual(parseImageRef(`[fd00::5]/app:2@${SHA}`), {
      registry: "[fd00::5]",
      path: "app",
      tag: "2",
      digest: SHA,
    });
    assert.deepEqual(parseImageRef("reg.example.com:443/t/app:1.2-rc_3"), {
      registry: "reg.example.com:443",
      path: "t/app",
      tag: "1.2-rc_3",
      digest: undefined,
    });
    const bad = [
      "busybox;id",
      "x?fromImage=evil",
      "busybox id",
      "busybox\nid",
      "busybox\u0000",
      "x/../y",
      "x/./y",
      "-x",
      "x_",
      "x:",
      "x@",
      ":tag",
      "reg.example.com:99999/x",
      "reg.example.com:0/x",
      "reg.example.com:/x",
      "[zz]/x",
      "[::1/x",
      "[1.2.3.4]/x",
      "reg_bad.com/x",
      "-reg.com/x",
      "x:" + "t".repeat(129),
      `x@sha512:${"a".repeat(128)}`,
      "a/".repeat(128) + "b",
    ];
    for (const ref of bad) assert.equal(typeof parseImageRef(ref), "string", JSON.stringify(ref));
  });
});

describe("image policy", () => {
  const policy = parseImagePolicy([
    "reg.example.com/team-a/",
    "kairos-test/",
    `docker.io/library/alpine@${SHA}`,
    "busybox:1.36",
  ]);
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
    assert.ok(
      isKairosError(checkImage(policy, "4f2a9b1c0d3e"), "invalid_argument"),
      "an image ID is refused under a policy",
    );
  });

  it('"*" allows any reference to a public registry, but nothing that does not parse (invalid_argument)', () => {
    const any = parseImagePolicy(["*"]);
    for (const ok of [
      "busybox",
      "ubuntu:22.04",
      "reg.example.com:5000/t/app:1",
      `ghcr.io/o/app@${SHA}`,
    ])
      assert.equal(checkImage(any, ok), undefined, ok);
    for (const bad of ["busybox;id", "x?fromImage=evil", "4f2a9b1c0d3e", "BusyBox", "a b"]) {
      const e = checkImage(any, bad);
      assert.ok(isKairosError(e, "invalid_argument") && e.field === "task.image", bad);
    }
  });

  it('"*" refuses registries on loopback, private and link-local addresses unless an entry names them', () => {
    const any = parseImagePolicy(["*"]);
    const internal = [
      "127.0.0.1:2375/x",
      "localhost:5000/x",
      "localhost/x",
      "[::1]/x",
      "[::1]:5000/x",
      "10.0.0.5/x",
      "10.1.2.3:5000/a/b:1",
      "192.168.1.10/x",
      "172.16.0.1/x",
      "169.254.169.254/x",
      "100.64.0.1/x",
      "0.0.0.0:2375/x",
      "[fd00::1]/x",
      "[fe80::1]:5000/x",
      "[::ffff:7f00:1]/x",
      "[::7f00:1]/x",
      "[64:ff9b::a00:1]/x",
      "127.1:5000/x",
      "0x7f.1/x",
      "2130706433:5000/x",
      "kairos.localhost/x",
      "localhost.localdomain/x",
    ];
    for (const ref of internal) {
      const e = checkImage(any, ref);
      assert.ok(
        isKairosError(e, "policy_denied") && e.field === "task.image",
        `${ref}: ${String(e)}`,
      );
      assert.match(e.message, /loopback, private or link-local/, ref);
    }
    const named = parseImagePolicy([
      "*",
      "localhost:5000/",
      "[::1]:5000/team/",
      `10.0.0.5/app@${SHA}`,
    ]);
    assert.equal(checkImage(named, "localhost:5000/x:1"), undefined);
    assert.equal(checkImage(named, "[::1]:5000/team/app"), undefined);
    assert.equal(checkImage(named, `10.0.0.5/app@${SHA}`), undefined);
    assert.ok(
      isKairosError(checkImage(named, "localhost:5001/x"), "policy_denied"),
      "another port is another registry",
    );
    assert.ok(isKairosError(checkImage(named, "[::1]:5000/other/app"), "policy_denied"));
    assert.ok(
      isKairosError(checkImage(named, "10.0.0.5/app:1"), "policy_denied"),
      "the digest entry allows only that digest",
    );
    assert.equal(checkImage(named, "busybox"), undefined, "* still allows public images");
  });

  it("rejects bad policies with invalid_argument", () => {
    for (const bad of [[], ["UPPER/"], ["x@sha256:1"], Array.from({ length: 65 }, () => "*")]) {
      assert.throws(
        () => parseImagePolicy(bad),
        (e: unknown) => isKairosError(e, "invalid_argument"),
        JSON.stringify(bad).slice(0, 80),
      );
    }
    assert.deepEqual(parseImagePolicy(["reg.example.com/"]).entries, [
      { kind: "prefix", prefix: "reg.example.com/" },
    ]);
    assert.deepEqual(parseImagePolicy(["docker.io/library/"]).entries, [
      { kind: "prefix", prefix: "docker.io/library/" },
    ]);
  });

  it("an inspected image carries its name only through RepoTags/RepoDigests (not an ID prefix)", () => {
    assert.ok(imageCarriesName("busybox", ["busybox:latest"], []));
    assert.ok(imageCarriesName("docker.io/kairos-test/busybox:1", ["kairos-test/busybox:1"], null));
    assert.ok(imageCarriesName(`alpine@${SHA}`, [], [`alpine@${SHA}`]));
    assert.ok(
      !imageCarriesName("4f2a", ["other-tenant/app:1"], []),
      "an ID prefix resolves to another name",
    );
    assert.ok(!imageCarriesName("busybox:2", ["busybox:latest"], []));
    assert.ok(!imageCarriesName("x", [], []));
  });
});

describe("docker lock-down additions", () => {
  const cfg = resolveExecutorOptions({
    workerId: "w",
    docker: { volumeTmpfsSizeMb: 4, nofileLimit: 256, maxImageVolumes: 2 },
  }).docker;

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
    assert.deepEqual(ulimits(cfg), [
      { Name: "nofile", Soft: 256, Hard: 256 },
      { Name: "core", Soft: 0, Hard: 0 },
    ]);
  });

  it("accepts only engines that apply a seccomp profile", () => {
    assert.equal(seccompProblem(["name=seccomp,profile=default"]), undefined);
    assert.equal(
      seccompProblem(["name=apparmor", "name=seccomp,profile=builtin", "name=cgroupns"]),
      undefined,
    );
    assert.match(seccompProblem(["name=seccomp,profile=unconfined"]) ?? "", /unconfined/);
    assert.match(seccompProblem(["name=apparmor"]) ?? "", /no seccomp/);
    assert.match(seccompProblem(undefined) ?? "", /no seccomp/);
  });
});
