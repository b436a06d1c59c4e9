#!/usr/bin/env bash
# Makes sure a Docker engine answers. If none does and dockerd is installed and we are root,
# starts `dockerd --bridge=none --iptables=false --ip-masq=false` (no default bridge: containers
# run with network none) and prints its pid on stdout so the caller can stop it afterwards.
# Prints nothing when an engine was already running. Exit 1 when no engine can be had.
set -euo pipefail
if docker info >/dev/null 2>&1; then exit 0; fi
if ! command -v dockerd >/dev/null 2>&1; then echo "docker-up: dockerd is not installed (apt-get install -y docker.io)" >&2; exit 1; fi
if [ "$(id -u)" != 0 ]; then echo "docker-up: no Docker engine answers; start one as root: dockerd --bridge=none --iptables=false --ip-masq=false" >&2; exit 1; fi
mkdir -p "${KAIROS_STATE_DIR:-.kairos}"
log="${KAIROS_STATE_DIR:-.kairos}/dockerd.log"
nohup dockerd --bridge=none --iptables=false --ip-masq=false >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 150); do
  if docker info >/dev/null 2>&1; then echo "$pid"; exit 0; fi
  if ! kill -0 "$pid" 2>/dev/null; then echo "docker-up: dockerd exited; see $log" >&2; tail -n 20 "$log" >&2; exit 1; fi
  sleep 0.2
done
echo "docker-up: dockerd did not answer within 30 s; see $log" >&2
kill "$pid" 2>/dev/null || true
exit 1
