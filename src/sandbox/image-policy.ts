/**
 * Which container images a tenant may name (pure). The API checks `task.image` against the
 * tenant's policy at create and patch (422 `policy_denied`); the docker executor checks that the
 * image found on the host really carries that name. An image is allowed when any entry allows it:
 * `*` (any public registry; not loopback, private or link-local ones), a `registry/namespace/`
 * prefix (whole path components), `repo@sha256:<64 hex>`, or `repo:tag` (tags are mutable).
 *
 * Both sides are normalised as Docker does (`docker.io`, `library/`, `:latest`), and every
 * reference is parsed first (`parseImageRef`): `busybox;id` is refused before any policy.
 *
 * Pitfall: the engine also resolves image IDs and ID prefixes, which would let a tenant name
 * another's image; every policy refuses a reference that is not a proper name, and the executor
 * checks the inspected image's RepoTags/RepoDigests (`imageCarriesName`).
 */
import { isIP } from "node:net";
import { KairosError } from "../lib/errors.ts";
import { isInternalHost } from "../lib/net-address.ts";

/** A parsed, normalised image reference. */
export interface ImageRef {
  /** Registry host (with port), e.g. `docker.io`, `registry.example.com:5000`. */
  readonly registry: string;
  /** Repository path on that registry, e.g. `library/busybox`. */
  readonly path: string;
  /** Tag when the reference has no digest (default `latest`); undefined with a digest and no tag. */
  readonly tag: string | undefined;
  /** `sha256:<64 hex>` when pinned. */
  readonly digest: string | undefined;
}

export type ImagePolicyEntry =
  | { readonly kind: "any" }
  | { readonly kind: "prefix"; readonly prefix: string }
  | { readonly kind: "digest"; readonly repo: string; readonly digest: string }
  | { readonly kind: "exact"; readonly repo: string; readonly tag: string };

/** A validated policy: its entries and the text they came from (for messages). */
export interface ImagePolicy {
  readonly entries: readonly ImagePolicyEntry[];
  readonly source: readonly string[];
}

/** Most entries in one policy; a bound like every other list (STYLE habit 11). */
export const MAX_POLICY_ENTRIES = 64;

// The reference grammar of the engine (distribution/reference), restricted to what an engine
// resolves as a name: [host[:port]/]path[:tag][@sha256:digest].
const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
const DIGEST = /^sha256:[a-f0-9]{64}$/;
const DOMAIN =
  /^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*$/;
const IPV6_HOST = /^\[([0-9A-Fa-f:.]+)\]$/;
/** Longest repository name (registry and path), the engine's own bound. */
const MAX_NAME_CHARS = 255;
const DOCKER_HUB = "docker.io";

/** Whether the first path component names a registry host (the engine's rule). */
function isRegistry(component: string): boolean {
  return (
    component === "localhost" ||
    component.includes(".") ||
    component.includes(":") ||
    component.startsWith("[")
  );
}

/** Why `registry` (host[:port]) is not a registry host, or undefined when it is one. */
function registryProblem(registry: string): string | undefined {
  const m = /^(.*?)(?::([0-9]{1,5}))?$/.exec(registry);
  const host = m?.[1] ?? "";
  const port = m?.[2];
  if (port !== undefined && !(Number(port) >= 1 && Number(port) <= 65535))
    return `"${registry}": the port must be 1-65535`;
  const v6 = IPV6_HOST.exec(host);
  if (v6 !== null ? isIP(v6[1]!) !== 6 : !DOMAIN.test(host))
    return `"${registry.slice(0, 100)}" is not a registry host`;
  return undefined;
}

/**
 * A registry host as image references name it (`host[:port]`, a DNS name, IPv4 or bracketed
 * IPv6 address), normalised (`index.docker.io` and `registry-1.docker.io` are `docker.io`);
 * `invalid_argument` otherwise. A tenant's registry credential is stored under this name.
 */
export function parseRegistry(registry: string, field = "registry"): string {
  const r = registry.trim();
  const problem =
    r.length === 0 || r.length > 255 || r.includes("/")
      ? `${JSON.stringify(registry.slice(0, 100))} is not a registry host (host[:port], no scheme or path)`
      : registryProblem(r);
  if (problem !== undefined)
    throw new KairosError("invalid_argument", `${field}: ${problem}`, { field });
  return r === "index.docker.io" || r === "registry-1.docker.io" ? DOCKER_HUB : r;
}

/** The host of a registry (`[::1]` kept bracketed, port dropped). */
export function registryHost(registry: string): string {
  return registry.startsWith("[")
    ? registry.slice(0, registry.indexOf("]") + 1)
    : registry.replace(/:[0-9]+$/, "");
}

/** Splits `name` into registry and normalised path, or returns why it is not a name. */
function splitName(name: string, hubLibrary = true): { registry: string; path: string } | string {
  const parts = name.split("/");
  let registry = DOCKER_HUB;
  if (parts.length > 1 && isRegistry(parts[0]!)) {
    registry = parts.shift()!;
    const problem = registryProblem(registry);
    if (problem !== undefined) return problem;
    if (registry === "index.docker.io" || registry === "registry-1.docker.io")
      registry = DOCKER_HUB;
  }
  if (parts.length === 0 || parts.some((p) => !COMPONENT.test(p)))
    return "repository path components must be lowercase letters, digits and separators (. _ __ -)";
  if (name.length > MAX_NAME_CHARS)
    return `the repository name must be at most ${MAX_NAME_CHARS} characters`;
  if (hubLibrary && registry === DOCKER_HUB && parts.length === 1) parts.unshift("library");
  return { registry, path: parts.join("/") };
}

/**
 * Parses an image reference the way the engine does — `[host[:port]/]path[:tag][@sha256:<hex>]`,
 * host a DNS name, an IPv4 address or a bracketed IPv6 address — names only, never IDs; a string
 * saying why when it is not one. Anything else (`busybox;id`, `x?fromImage=evil`, spaces,
 * control characters, upper case in the path) is not a reference.
 */
export function parseImageRef(ref: string): ImageRef | string {
  if (ref.length === 0 || ref.length > 512) return "must be 1-512 characters";
  if (/^(?:sha256:)?[a-f0-9]{12,64}$/.test(ref))
    return "an image ID is not accepted; name the image by repository (and tag or digest)";
  let rest = ref;
  let digest: string | undefined;
  const at = rest.indexOf("@");
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest)) return "the digest must be sha256:<64 lowercase hex>";
  }
  let tag: string | undefined;
  const colon = rest.lastIndexOf(":");
  if (colon > rest.lastIndexOf("/") && colon > rest.lastIndexOf("]")) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) return `${JSON.stringify(tag.slice(0, 130))} is not a valid tag`;
  }
  const name = splitName(rest);
  if (typeof name === "string") return name;
  return { ...name, tag: tag ?? (digest === undefined ? "latest" : undefined), digest };
}

/** `registry/path`, the repository an entry or reference names. */
const repoOf = (r: ImageRef): string => `${r.registry}/${r.path}`;

function parseEntry(text: string): ImagePolicyEntry | string {
  const s = text.trim();
  if (s === "*") return { kind: "any" };
  if (s.endsWith("/")) {
    const host = s.slice(0, -1);
    // A bare registry host ("registry.example.com/"): every repository on it.
    if (!host.includes("/") && isRegistry(host))
      return (
        registryProblem(host) ?? {
          kind: "prefix",
          prefix: `${host === "index.docker.io" ? DOCKER_HUB : host}/`,
        }
      );
    // A namespace: "team/" on Docker Hub stays "docker.io/team/" (no "library/").
    const name = splitName(host, false);
    if (typeof name === "string") return name;
    return { kind: "prefix", prefix: `${name.registry}/${name.path}/` };
  }
  const ref = parseImageRef(s);
  if (typeof ref === "string") return ref;
  if (ref.digest !== undefined) return { kind: "digest", repo: repoOf(ref), digest: ref.digest };
  return { kind: "exact", repo: repoOf(ref), tag: ref.tag ?? "latest" };
}

/** Validates policy entries (operator flag or tenant record); `invalid_argument` naming the bad entry. */
export function parseImagePolicy(entries: readonly string[], field = "image_policy"): ImagePolicy {
  if (entries.length === 0)
    throw new KairosError(
      "invalid_argument",
      `${field}: at least one entry (use "*" to allow any image)`,
      { field },
    );
  if (entries.length > MAX_POLICY_ENTRIES)
    throw new KairosError(
      "invalid_argument",
      `${field}: at most ${MAX_POLICY_ENTRIES} entries, got ${entries.length}`,
      { field },
    );
  const out: ImagePolicyEntry[] = [];
  for (const e of entries) {
    const p = parseEntry(e);
    if (typeof p === "string")
      throw new KairosError(
        "invalid_argument",
        `${field}: ${JSON.stringify(e.slice(0, 200))}: ${p}`,
        { field },
      );
    out.push(p);
  }
  return Object.freeze({ entries: Object.freeze(out), source: Object.freeze([...entries]) });
}

/** The policy that allows every image. */
export const ALLOW_ANY_IMAGE: ImagePolicy = parseImagePolicy(["*"]);

function allows(e: ImagePolicyEntry, r: ImageRef): boolean {
  switch (e.kind) {
    case "any":
      return true;
    case "prefix":
      return repoOf(r).startsWith(e.prefix);
    case "digest":
      return r.digest === e.digest && repoOf(r) === e.repo;
    case "exact":
      return r.digest === undefined && r.tag === e.tag && repoOf(r) === e.repo;
  }
}

/**
 * Checks `image` against `policy`: undefined when allowed, else a `KairosError` for `field` —
 * `invalid_argument` (400) when it is not a reference at all (whatever the policy), or
 * `policy_denied` (422). A reference whose registry is inside the operator's network (a loopback,
 * private or link-local address, `localhost`: src/lib/net-address.ts) is allowed only by an entry
 * that names it (a prefix, tag or digest on that registry), never by `*` alone: the engine that
 * pulls it sits inside that network.
 */
export function checkImage(
  policy: ImagePolicy,
  image: string,
  field = "task.image",
): KairosError | undefined {
  const ref = parseImageRef(image);
  if (typeof ref === "string")
    return new KairosError("invalid_argument", `${field}: ${ref}`, { field });
  if (policy.entries.some((e) => e.kind !== "any" && allows(e, ref))) return undefined;
  if (isInternalHost(registryHost(ref.registry))) {
    return new KairosError(
      "policy_denied",
      `${field}: image ${JSON.stringify(image.slice(0, 200))} names a registry on a loopback, private or link-local address (${ref.registry}); only an image policy entry naming that registry (e.g. "${ref.registry}/") allows it`,
      { field },
    );
  }
  if (policy.entries.some((e) => e.kind === "any")) return undefined;
  const shown = policy.source.slice(0, 5).join(", ") + (policy.source.length > 5 ? ", …" : "");
  return new KairosError(
    "policy_denied",
    `${field}: image ${JSON.stringify(image.slice(0, 200))} is not allowed for this tenant (allowed: ${shown})`,
    { field },
  );
}

/**
 * Whether an image found on the host (its RepoTags and RepoDigests, as the engine reports
 * them) carries the name `image` — i.e. the engine resolved the reference as a name and not
 * as an ID prefix. An unparseable reference carries no name.
 */
export function imageCarriesName(
  image: string,
  repoTags: readonly string[] | null | undefined,
  repoDigests: readonly string[] | null | undefined,
): boolean {
  const want = parseImageRef(image);
  if (typeof want === "string") return false;
  const names = [...(repoTags ?? []), ...(repoDigests ?? [])];
  return names.some((n) => {
    const have = parseImageRef(n);
    if (typeof have === "string" || repoOf(have) !== repoOf(want)) return false;
    return want.digest !== undefined ? have.digest === want.digest : have.tag === want.tag;
  });
}
