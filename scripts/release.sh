#!/usr/bin/env bash
# `npm run release`: builds the artefact the Nomad jobs download (deploy/nomad/kairos.nomad.hcl,
# docs/deploy.md "Release artefact"):
#
#   dist/kairos-<version>-<os>-<arch>.tar.gz          what a node needs, unpacked at its root:
#       bin/ src/ package.json package-lock.json RELEASE node_modules/ (from `npm ci`)
#   dist/kairos-<version>-<os>-<arch>.tar.gz.sha256   `sha256sum` format: "<hex>  <file>"
#
# - The sources are the COMMIT (`git archive`, default HEAD; `--ref <rev>`), never the working
#   tree, so uncommitted edits cannot slip into a release. RELEASE records version and commit.
# - node_modules comes from `npm ci` against the commit's package-lock.json, dev dependencies
#   included (bin/kairos.mjs runs the TypeScript through tsx), install scripts off. Some
#   packages are per platform (esbuild under tsx): build on the OS and CPU of the Nomad clients
#   (the name carries them). `--reuse-node-modules` copies this checkout's node_modules instead
#   (offline builds; it must have been installed from the same package-lock.json).
# - Reproducible: files sorted, owner 0, mtimes set to the commit's time, gzip without a name
#   or time stamp, so the same commit and lock file give the same bytes (and checksum).
# - Smoke check: the staged tree's `kairos --help` must run before anything is packed.
#
# Usage: scripts/release.sh [--ref <rev>] [--out <dir>] [--reuse-node-modules]
set -euo pipefail
cd "$(dirname "$0")/.."

ref=HEAD
out=dist
reuse=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ref) ref="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --reuse-node-modules) reuse=1; shift ;;
    *) echo "release: unknown option $1 (usage: scripts/release.sh [--ref <rev>] [--out <dir>] [--reuse-node-modules])" >&2; exit 2 ;;
  esac
done
say() { echo "release: $*" >&2; }

commit=$(git rev-parse --verify "$ref^{commit}")
version=$(git show "$commit:package.json" | node -e 'let s="";process.stdin.on("data",(d)=>(s+=d)).on("end",()=>console.log(JSON.parse(s).version))')
platform="$(node -p 'process.platform')-$(node -p 'process.arch')"
name="kairos-${version}-${platform}.tar.gz"
epoch=$(git show -s --format=%ct "$commit")
if ! git diff --quiet "$commit" -- bin src package.json package-lock.json 2>/dev/null; then
  say "note: the working tree differs from ${commit:0:12} in bin/, src/ or package files; the release is built from the commit"
fi

stage=$(mktemp -d "${TMPDIR:-/tmp}/kairos-release.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
mkdir -p "$root"
git archive --format=tar "$commit" bin src package.json package-lock.json | tar -x -C "$root"
printf 'name: kairos\nversion: %s\ncommit: %s\nplatform: %s\nnode: %s\n' "$version" "$commit" "$platform" "$(node -v)" >"$root/RELEASE"

if [ "$reuse" = 1 ]; then
  [ -d node_modules ] || { say "--reuse-node-modules: no node_modules here (npm ci first)"; exit 1; }
  cmp -s package-lock.json "$root/package-lock.json" || { say "--reuse-node-modules: this checkout's package-lock.json differs from ${commit:0:12}'s"; exit 1; }
  say "copying node_modules from this checkout"
  cp -a node_modules "$root/node_modules"
  rm -f "$root/node_modules/.kairos-lock-stamp"
else
  say "npm ci (dev dependencies included: tsx runs the sources)"
  (cd "$root" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
fi
rm -rf "$root/node_modules/.cache" "$root/node_modules/.package-lock.json"

say "smoke check: kairos --help from the staged tree"
(cd "$stage" && node "$root/bin/kairos.mjs" --help >/dev/null)

mkdir -p "$out"
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --format=gnu \
  -C "$root" -cf - . | gzip -n -9 >"$out/$name"
(cd "$out" && sha256sum "$name" >"$name.sha256")
sum=$(cut -d' ' -f1 "$out/$name.sha256")
size=$(du -h "$out/$name" | cut -f1)
say "built $out/$name ($size) from ${commit:0:12}"
say "checksum: $out/$name.sha256"
echo "kairos_artifact_url      = \"<your artifact store>/$name\""
echo "kairos_artifact_checksum = \"sha256:$sum\""
