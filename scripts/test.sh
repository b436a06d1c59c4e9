#!/usr/bin/env bash
# The test command (`npm test`): installs what is missing, starts a Docker engine if one is
# installed but not running (and stops it again afterwards), then runs type check, lint and
# every test suite against real nats-server processes and the real engine.
# KAIROS_REQUIRE_DOCKER=1 (set by .ci/run) turns "no engine" into a failure instead of a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
docker_flag=()
if [ "$(id -u)" = 0 ] || [ "${KAIROS_REQUIRE_DOCKER:-0}" = 1 ]; then docker_flag=(--docker --registry); fi
# --browser: Debian's chromium for the dashboard's browser tests (test/e2e/dashboard.test.ts).
bash scripts/bootstrap.sh "${docker_flag[@]}" --browser

dockerd_pid=""
# dockerd is not our child (docker-up.sh started it), so `wait` cannot be used: poll until it is gone.
cleanup() {
  if [ -n "$dockerd_pid" ]; then
    kill "$dockerd_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.2; done
  fi
}
trap cleanup EXIT
if out=$(bash scripts/docker-up.sh); then
  dockerd_pid="$out"
  export KAIROS_DOCKER=1
else
  if [ "${KAIROS_REQUIRE_DOCKER:-0}" = 1 ]; then echo "test: a Docker engine is required (KAIROS_REQUIRE_DOCKER=1)" >&2; exit 1; fi
  echo "test: no Docker engine; Docker tests will be skipped" >&2
fi

echo "== type check"; npx tsc --noEmit -p .
echo "== lint"; npx eslint .
echo "== formatting"; npx prettier --check src test bench scripts
echo "== dependency rules (no cycle between areas of src/)"; npx depcruise src
echo "== tests"
files=()
for suite in unit integration e2e chaos; do
  while IFS= read -r f; do files+=("$f"); done < <(find "test/$suite" -name '*.test.ts' 2>/dev/null | sort)
done
# Suites spawn real servers; run files two at a time on this 2-core machine.
node --import tsx --test --test-concurrency=2 --test-timeout=300000 --test-reporter=spec "${files[@]}"
