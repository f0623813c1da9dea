#!/usr/bin/env bash
# Replays the same generated ShouldRateLimit requests to envoyproxy/ratelimit (the reference
# build in ../shared/peers/envoy-ratelimit, which a clone of sluice does not have) and to
# sluiced, one rules file at a time, and prints the mismatches per file. Not a test: it needs
# the reference.
#
#   bench/peers/compare.sh [--requests 150] [--seed 1] [--redis] [--show N] [-- SLUICED_FLAGS...]
#   (FILES... or all of tests/data/envoy-ratelimit); requests sent by replay.py (never across a
#   second's end, so that both count in the same windows); their settings pass through the
#   environment (sluiced reads them too), e.g.
#   SHADOW_MODE=true LIMIT_RESPONSE_HEADERS_ENABLED=true bench/peers/compare.sh --redis
# sluiced runs on the memory store, or with --redis on a redis-server of its own (the
# reference always runs on one of its own); --show N prints the first N mismatches of a file.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
peer=${PEER:-$root/../shared/peers/envoy-ratelimit}
requests=150 seed=1 files=() flags=() redis=0 show=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --requests) requests=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --redis) redis=1; shift ;;
    --show) show=$2; shift 2 ;;
    --) shift; flags=("$@"); break ;;
    *) files+=("$1"); shift ;;
  esac
done
store=memory redis_pid=
if [[ $redis -eq 1 ]]; then
  rdir=$(mktemp -d)
  redis-server --port 0 --unixsocket "$rdir/redis.sock" --save "" --appendonly no \
    --daemonize no > "$rdir/log" 2>&1 &
  redis_pid=$!
  trap 'kill $redis_pid 2>/dev/null; rm -rf "$rdir"' EXIT
  for _ in $(seq 100); do [[ -S "$rdir/redis.sock" ]] && break; sleep 0.05; done
  store="unix://$rdir/redis.sock"
  flags=(--redis-timeout 1s ${flags[@]+"${flags[@]}"})  # A loaded machine: no timeouts
fi
# sluiced reads their settings from the environment too: the store, and a log level that
# says which port it took, are given here.
flags=(--store "$store" --log-level info ${flags[@]+"${flags[@]}"})
[[ -x "$peer/run.sh" ]] || { echo "compare.sh: no reference at $peer (set PEER)" >&2; exit 2; }
if [[ ${#files[@]} -eq 0 ]]; then
  # The files they accept, one domain each (merge_domain_* need MERGE_DOMAIN_CONFIG).
  mapfile -t files < <(find "$root/tests/data/envoy-ratelimit" -name '*.yaml' | sort |
    grep -vE '/(bad_|duplicate_|empty_|misspelled_|non_|replaces_|unlimited_with_unit|merge_domain_|reload)')
fi
for f in "${files[@]}"; do
  d=$(mktemp -d)
  cp "$f" "$d/"
  /usr/bin/python3 "$root/bench/peers/requests.py" "$f" "$seed" "$requests" > "$d/requests.jsonl"
  [[ -n "$redis_pid" ]] && redis-cli -s "${store#unix://}" flushall > /dev/null
  "$root/build/bin/sluiced" --config "$d" --http 127.0.0.1:0 --grpc 127.0.0.1:0 --threads 1 \
    "${flags[@]}" 2> "$d/log" &
  pid=$! port=
  for _ in $(seq 100); do
    port=$(grep -o 'grpc://127.0.0.1:[0-9]*' "$d/log" | grep -o '[0-9]*$')
    [[ -n "$port" ]] && break
    sleep 0.05
  done
  if [[ -z "$port" ]]; then
    echo "$f: sluiced did not start: $(tail -1 "$d/log")"
  else
    echo "${f#"$root/"}: $("$peer/run.sh" "$d" -- sh -c '/usr/bin/python3 "$0" "$1" "$RL_GRPC_ADDR" \
      "$2" "$3" --show "$4"' "$root/bench/peers/replay.py" "$peer" "127.0.0.1:$port" \
      "$d/requests.jsonl" "$show" 2>&1 | grep -vE '^([A-Z_]+=|run.sh: )')"
  fi
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  rm -rf "$d"
done
