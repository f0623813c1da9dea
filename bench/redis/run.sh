#!/usr/bin/env bash
# The Redis benchmark: decisions through RedisStore against the engine's ceiling, which is
# redis-benchmark running EVALSHA of the same script, with the same arguments, at the same
# number of calls in flight, on a redis-server of its own on a free loopback port.
#
#   bench/redis/run.sh [--duration 5] [--requests 200000] [--abusive]
#
# Rows: calls in flight; redis-benchmark's calls/s (the ceiling); RedisStore on 1 and on 8
# connections (a script call per decision); RedisStore batching the decisions in flight
# together into one script call (--pipeline 1 --batch 32 per connection). Last (or alone, with
# --abusive): an abusive key at 50x its limit, with and without the denial cache, paced and
# as fast as 8 threads can ask.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
duration=5
requests=200000
only_abusive=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --abusive) only_abusive=1; shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
load="$root/build/bin/sluice_redis_load"
[[ -x "$load" ]] || { echo "run.sh: build first (make build)" >&2; exit 1; }
# shellcheck source=bench/redis/redis_server.sh
source "$root/bench/redis/redis_server.sh"

sha=$(cat "$root"/src/redis/{decide,give_back,settle,convert,requests}.lua | redis-cli -p "$port" -x script load)
# One gcra limit of 1,000,000 per second (every call admitted), keys k0..k99999, as
# sluice_redis_load sends them: margin, requests, expires (none: ''), time (Redis's), cost, limits,
# mode, then the limit's algorithm code, N, P, B, K, N', P', and its earlier figures (none: 0).
key='sluice:g1000000/1000000b1000000:{k__rand_int__}'
args=(1000 1 '' '' 1 1 0 5 1000000 1000000 1000000 1 1 1 0)

ceiling() {  # calls in flight -> calls/s
  redis-benchmark -p "$port" -c "$1" -n "$requests" -r 100000 --csv \
    evalsha "$sha" 1 "$key" "${args[@]}" | tail -1 | cut -d, -f2 | tr -d '"' | cut -d. -f1
}
store() {  # flags -> the generator's line
  "$load" --url "redis://127.0.0.1:$port" --duration "$duration" "$@"
}

# One fixed_window key of 200 per second asked 10,000 times a second (50x), then unpaced.
abusive() {
  local common=(--abuse-limit 200 --inflight 8 --connections 2 --pipeline 16 --batch 32)
  echo
  echo "== an abusive key at 50x its limit: fixed_window 200/s, 10,000 decisions/s from 8 threads"
  echo "without the denial cache: $(store "${common[@]}" --rate 10000)"
  echo "with the denial cache:    $(store "${common[@]}" --rate 10000 --deny-cache 1000)"
  echo "== the same key, as fast as 8 threads can ask"
  echo "without the denial cache: $(store "${common[@]}")"
  echo "with the denial cache:    $(store "${common[@]}" --deny-cache 1000)"
}
if [[ $only_abusive == 1 ]]; then
  abusive
  exit 0
fi

echo "redis-server $(redis-server --version | grep -o 'v=[0-9.]*'), $(nproc) cores; ${duration}s per RedisStore run"
for inflight in 1 16; do
  c=$(ceiling "$inflight")
  echo
  echo "== $inflight in flight: redis-benchmark EVALSHA (-c $inflight): $c calls/s"
  echo "RedisStore, 1 connection:            $(store --inflight "$inflight" --connections 1 --pipeline 16 --batch 1)"
  echo "RedisStore, 8 connections:           $(store --inflight "$inflight" --connections 8 --pipeline 16 --batch 1)"
  echo "RedisStore, 1 connection, batching:  $(store --inflight "$inflight" --connections 1 --pipeline 1 --batch 32)"
  echo "RedisStore, 8 connections, batching: $(store --inflight "$inflight" --connections 8 --pipeline 1 --batch 32)"
done
inflight=64
echo
echo "== $inflight in flight (batching's home ground): redis-benchmark EVALSHA (-c $inflight): $(ceiling $inflight) calls/s"
echo "RedisStore, 8 connections:           $(store --inflight $inflight --connections 8 --pipeline 16 --batch 1)"
echo "RedisStore, 2 connections, batching: $(store --inflight $inflight --connections 2 --pipeline 1 --batch 32)"
abusive
