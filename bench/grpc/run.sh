#!/usr/bin/env bash
# The gRPC benchmark: sluiced (--threads 2, a rules file with one fixed-window rule per user,
# high enough that every call is admitted) on a free port, asked by sluice_grpc_load with
# 64 calls in flight over 2 connections for 10 s. Prints calls/s and latency percentiles.
#
#   bench/grpc/run.sh [--duration 10] [--concurrency 64] [--redis] [--sluiced PATH]
#
# --redis: the same on the Redis store, a redis-server of its own on a free port.
# --sluiced: another build of sluiced (to compare two versions in one sitting).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
duration=10
concurrency=64
redis=
sluiced="$root/build/bin/sluiced"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --redis) redis=1; shift ;;
    --sluiced) sluiced=$2; shift 2 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-grpc.XXXXXX")
pid=
redis_port=
cleanup() {
  [[ -n "$pid" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  [[ -n "$redis_port" ]] && redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
cat > "$work/rules.yaml" <<'RULES'
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000}
RULES
store=(--store memory)
if [[ -n "$redis" ]]; then
  redis_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
    --logfile "$work/redis.log" --daemonize yes
  for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.05; done
  store=(--store "redis://127.0.0.1:$redis_port")
fi
"$sluiced" --config "$work/rules.yaml" --http 127.0.0.1:0 --grpc 127.0.0.1:0 \
  --threads 2 "${store[@]}" 2> "$work/log" &
pid=$!
port=
for _ in $(seq 100); do
  port=$(grep -o 'grpc://127.0.0.1:[0-9]*' "$work/log" | grep -o '[0-9]*$' || true)
  [[ -n "$port" ]] && break
  sleep 0.05
done
[[ -n "$port" ]] || { echo "run.sh: sluiced did not start" >&2; cat "$work/log" >&2; exit 1; }
echo "sluiced --threads 2 ${store[*]}, gRPC on port $port; $concurrency calls in flight, ${duration}s"
"$root/build/bin/sluice_grpc_load" --target "127.0.0.1:$port" --domain bench \
  --concurrency "$concurrency" --duration "$duration"
