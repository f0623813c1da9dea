#!/usr/bin/env bash
# Requests over two slots against requests over one, on a Redis Cluster of 3 masters made
# here on free loopback ports: sluice_redis_load with two limits per request, their keys
# tagged alike (one slot: one script call) or apart (two slots: charged one after the other,
# src/redis/multislot.h), in alternating rounds, and the ratio per round. With --settle, each
# request is a check and then its settle (sluice_redis_load --settle: one script call per slot,
# the first slot's before the others).
#
#   bench/redis/cluster.sh [--duration 5] [--rounds 3] [--inflight 64] [--settle]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
duration=5
rounds=3
inflight=64
settle=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --inflight) inflight=$2; shift 2 ;;
    --settle) settle=(--settle); shift ;;
    *) echo "cluster.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
load="$root/build/bin/sluice_redis_load"
[[ -x "$load" ]] || { echo "cluster.sh: build first (make build)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-cluster.XXXXXX")
ports=()
cleanup() {
  for port in "${ports[@]}"; do
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
free_port() {  # A free port whose cluster bus port (+10000) is free too.
  python3 -c '
import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p + 10000 > 65535: continue
    try:
        b = socket.socket(); b.bind(("127.0.0.1", p + 10000)); b.close(); print(p); break
    except OSError: pass'
}
for i in 0 1 2; do
  port=$(free_port)
  ports+=("$port")
  mkdir -p "$work/$i"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work/$i" \
    --logfile "$work/$i/redis.log" --daemonize yes --cluster-enabled yes \
    --cluster-config-file nodes.conf
done
for port in "${ports[@]}"; do
  until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
done
redis-cli --cluster create "${ports[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes \
  >/dev/null
for port in "${ports[@]}"; do
  until redis-cli -p "$port" cluster info | grep -q cluster_state:ok; do sleep 0.05; done
done
url="redis+cluster://127.0.0.1:${ports[0]}"
common=(--url "$url" --connections 2 --pipeline 16 --batch 32 --inflight "$inflight"
        --limits 2 --duration "$duration" "${settle[@]}")
echo "# $inflight requests in flight, two limits each, ${duration}s per run${settle:+, each a check then its settle}"
for round in $(seq 1 "$rounds"); do
  one=$("$load" "${common[@]}")
  two=$("$load" "${common[@]}" --apart)
  a=$(awk '{print $1}' <<<"$one")
  b=$(awk '{print $1}' <<<"$two")
  echo "round $round: one slot: $one"
  echo "round $round: two slots: $two"
  awk -v a="$a" -v b="$b" -v r="$round" 'BEGIN { printf "round %d: two slots / one slot = %.2f\n", r, b / a }'
done
