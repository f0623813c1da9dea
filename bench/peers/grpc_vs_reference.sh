#!/usr/bin/env bash
# The Envoy API's speed beside envoyproxy/ratelimit's in one sitting, interleaved rounds (3):
# the reference on Redis (../shared/peers/envoy-ratelimit/run.sh, which a clone does not have:
# then its run is skipped, saying so), sluiced on Redis and on memory, each asked by
# sluice_grpc_load with 64 calls in flight for --duration seconds (10), one rule high enough
# that every call is admitted. Prints each run's calls/s and latencies, and the server's CPU in
# clock ticks (utime+stime, 1/100 s) over the run. bench/peers/table.py reads these lines.
#
#   bench/peers/grpc_vs_reference.sh [--rounds 3] [--duration 10]
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PEER=${PEER:-$ROOT/../shared/peers/envoy-ratelimit}
ROUNDS=3 DURATION=10
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    *) echo "grpc_vs_reference.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ && $DURATION =~ ^[1-9][0-9]*$ ]] ||
  { echo "grpc_vs_reference.sh: --rounds and --duration take whole numbers of 1 or more" >&2; exit 2; }
CONF=$(mktemp -d)
trap 'rm -rf "$CONF"' EXIT
cat > "$CONF/bench.yaml" <<'RULES'
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000}
RULES
LOAD=$ROOT/build/bin/sluice_grpc_load
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
one() { # pid addr label
  local before after out
  before=$(cpu $1)
  out=$($LOAD --target $2 --domain bench --concurrency 64 --duration $DURATION 2>&1)
  after=$(cpu $1)
  echo "$3: $(echo "$out" | tr '\n' ' ' | cut -c1-200) | server CPU ticks $((after-before))"
}
for round in $(seq "$ROUNDS"); do
  if [[ -x "$PEER/run.sh" ]]; then
    "$PEER/run.sh" "$CONF" -- bash -c "$(declare -f cpu one); LOAD=$LOAD DURATION=$DURATION; one \$RL_PID \$RL_GRPC_ADDR reference-redis" 2>/dev/null | grep reference
  else
    echo "reference-redis: skipped: no reference at $PEER (a clone does not have it; set PEER)"
  fi
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  d=$(mktemp -d)
  redis-server --port $port --bind 127.0.0.1 --save '' --appendonly no --dir $d --daemonize yes --logfile $d/r.log
  sleep 0.3
  for store in "redis://127.0.0.1:$port" memory; do
    $ROOT/build/bin/sluiced --config "$CONF" --http 127.0.0.1:0 --grpc 127.0.0.1:0 --threads 2 --store $store 2> $d/log &
    pid=$!
    for _ in $(seq 100); do g=$(grep -o 'grpc://127.0.0.1:[0-9]*' $d/log | grep -o '[0-9]*$'); [ -n "$g" ] && break; sleep 0.05; done
    one $pid 127.0.0.1:$g "sluiced-${store%%:*}"
    kill $pid; wait $pid 2>/dev/null
  done
  redis-cli -p $port shutdown nosave >/dev/null 2>&1; rm -rf $d
done
