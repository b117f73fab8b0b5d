#!/usr/bin/env bash
# storeburst: the loaded burst the store timeouts were chosen from. Two
# gateway processes on one healthy redis-server (the request limiter,
# failing closed, and a token quota on it, at their default timeouts),
# CPU 0 kept busy by a pinned busy loop, answer REQUESTS concurrent first
# streams (one second each); each of RUNS runs prints its refusals and
# times, then the total. make test runs the same test with 100 requests
# and one run (TestRedisLoadedBurst).
#
#   scripts/storeburst/storeburst.sh [REQUESTS [RUNS [TIMEOUT]]]   # default 200 10
#
# TIMEOUT (e.g. 50ms) replaces both stores' default timeout
# (limiter.timeout, budget.timeout), to compare one with another.
set -euo pipefail
cd "$(dirname "$0")/../.."
requests=${1:-200}
runs=${2:-10}
export GATEWAY_BURST_TIMEOUT=${3:-}
command -v redis-server >/dev/null || make redis
out=$(GATEWAY_BURST_REQUESTS=$requests go test ./functions/gateway -run '^TestRedisLoadedBurst$' \
  -count="$runs" -v -timeout 30m 2>&1 || true)
grep -E 'concurrent first requests' <<<"$out" | sed 's/^ *//'
failed=$(grep -c -- '--- FAIL: TestRedisLoadedBurst' <<<"$out" || true)
echo "runs with a refusal: $failed of $runs"
grep -E 'concurrent first requests' <<<"$out" | grep -oE '[0-9]{3} [a-z_]+:[0-9]+' | awk -F: '{n += $2} END {print "refused in all:", n + 0, "of", '"$requests"' * '"$runs"'}'
