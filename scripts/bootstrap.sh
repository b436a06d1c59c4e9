#!/usr/bin/env bash
# Installs what Kairos needs on a fresh Debian bookworm machine, idempotently:
#   - npm packages (npm ci / npm install) when node_modules is missing or stale
#   - nats-server >= 2.10.23 (Debian trixie's package; bookworm's 2.9.10 has a CAS bug)
#   - docker.io and busybox-static, and curl and jq for the README's quick start (only with
#     --docker, which `npm start` passes)
#   - docker-registry and apache2-utils (htpasswd) for the tests' private registry (only with
#     --registry, which `npm test` passes)
#   - Debian's chromium for the dashboard's browser tests (only with --browser, which
#     `npm test` passes; the tests drive it with playwright-core and never download a browser)
# As root it installs through apt; otherwise it prints exactly what to install and exits 1.
# Usage: scripts/bootstrap.sh [--docker] [--registry] [--browser] [--quiet]
set -euo pipefail
cd "$(dirname "$0")/.."

want_docker=0
want_registry=0
want_browser=0
quiet=0
for a in "$@"; do
  case "$a" in
    --docker) want_docker=1 ;;
    --registry) want_registry=1 ;;
    --browser) want_browser=1 ;;
    --quiet) quiet=1 ;;
    *) echo "bootstrap: unknown option $a" >&2; exit 2 ;;
  esac
done
say() { [ "$quiet" = 1 ] || echo "bootstrap: $*" >&2; }

MIN_NATS="2.10.23"
is_root() { [ "$(id -u)" = 0 ]; }

# --- npm packages ---------------------------------------------------------
stamp=node_modules/.kairos-lock-stamp
if [ ! -d node_modules ] || [ ! -f "$stamp" ] || ! cmp -s package-lock.json "$stamp" 2>/dev/null; then
  say "installing npm packages"
  if [ -f package-lock.json ]; then npm ci --no-audit --no-fund --loglevel=error >&2; else npm install --no-audit --no-fund --loglevel=error >&2; fi
  cp package-lock.json "$stamp"
fi

# --- nats-server ----------------------------------------------------------
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }
nats_version() { nats-server --version 2>/dev/null | sed -n 's/.*v\([0-9][0-9.]*\).*/\1/p' | head -n1; }

apt_updated=0
apt_update() { if [ "$apt_updated" = 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2; apt_updated=1; fi; }

install_nats() {
  local tmp; tmp=$(mktemp -d)
  mkdir -p "$tmp/lists/partial" "$tmp/archives/partial"
  echo "deb http://deb.debian.org/debian trixie main" > "$tmp/trixie.list"
  local opts=(-o "Dir::Etc::SourceList=$tmp/trixie.list" -o "Dir::Etc::SourceParts=-" -o "Dir::State::Lists=$tmp/lists" -o "APT::Get::List-Cleanup=0")
  say "fetching nats-server from Debian trixie"
  apt-get "${opts[@]}" update -qq >&2
  (cd "$tmp" && apt-get "${opts[@]}" download nats-server >&2)
  dpkg -i "$tmp"/nats-server_*.deb >&2 || { apt_update; DEBIAN_FRONTEND=noninteractive apt-get install -f -y -qq >&2; }
  rm -rf "$tmp"
}

v=$(nats_version || true)
if [ -z "$v" ] || ! version_ge "$v" "$MIN_NATS"; then
  if is_root; then
    install_nats
    v=$(nats_version || true)
    if [ -z "$v" ] || ! version_ge "$v" "$MIN_NATS"; then echo "bootstrap: nats-server install failed (found '${v:-none}')" >&2; exit 1; fi
  else
    cat >&2 <<MSG
bootstrap: nats-server >= $MIN_NATS is required (found: ${v:-none}). As root, run:
  tmp=\$(mktemp -d); echo 'deb http://deb.debian.org/debian trixie main' > \$tmp/t.list
  apt-get -o Dir::Etc::SourceList=\$tmp/t.list -o Dir::Etc::SourceParts=- -o Dir::State::Lists=\$tmp update
  (cd \$tmp && apt-get -o Dir::Etc::SourceList=\$tmp/t.list -o Dir::Etc::SourceParts=- -o Dir::State::Lists=\$tmp download nats-server)
  dpkg -i \$tmp/nats-server_*.deb
MSG
    exit 1
  fi
fi
say "nats-server $v"

# Installs the packages named in "missing" (as root), or says what to install and exits 1.
install_missing() {
  if [ "${#missing[@]}" -gt 0 ]; then
    if is_root; then
      say "installing ${missing[*]}"
      apt_update
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
    else
      echo "bootstrap: missing ${missing[*]}. As root, run: apt-get install -y ${missing[*]}" >&2
      exit 1
    fi
  fi
}

# --- docker + busybox -----------------------------------------------------
if [ "$want_docker" = 1 ]; then
  missing=()
  command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
  dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
  # The task network's firewall (src/sandbox/task-network.ts) is nftables rules.
  command -v nft >/dev/null 2>&1 || missing+=(nftables)
  # The quick start (README) talks to the API with curl and reads .kairos/dev.json with jq.
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  command -v jq >/dev/null 2>&1 || missing+=(jq)
  install_missing
fi

# --- a private registry for the pull tests (test/support/registry.ts) ------
if [ "$want_registry" = 1 ]; then
  missing=()
  [ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
  [ -x /usr/bin/htpasswd ] || missing+=(apache2-utils)
  install_missing
fi
# --- chromium for the dashboard's browser tests (test/support/browser.ts) ---
if [ "$want_browser" = 1 ] && [ -z "${KAIROS_CHROMIUM:-}" ]; then
  missing=()
  [ -x /usr/bin/chromium ] || missing+=(chromium)
  install_missing
fi
exit 0
