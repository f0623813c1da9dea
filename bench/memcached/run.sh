#!/usr/bin/env bash
# Decisions through RedisStore beside MemcachedStore, in one sitting: a redis-server and a
# memcached of their own on free loopback ports; for fixed_window (a counter) and gcra, on cold
# keys (100,000 drawn at random) and on one hot key; every decision admitted (so every one
# writes), 16 calls in flight. Prints decisions/s and p99 for each, and Memcached's ratio to
# Redis, with the cas conflicts per Memcached decision and the calls that exhausted their
# retries (32; each an error under the deny policy).
#
#   bench/memcached/run.sh [--duration 5] [--inflight 16]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
duration=5
inflight=16
while [[ $# -gt 0 ]]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --inflight) inflight=$2; shift 2 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
load="$root/build/bin/sluice_store_load"
[[ -x "$load" ]] || { echo "run.sh: build sluice_store_load first" >&2; exit 1; }
# shellcheck source=bench/redis/redis_server.sh
source "$root/bench/redis/redis_server.sh"
mc_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
user=()
[[ $(id -u) -eq 0 ]] && user=(-u root)
memcached -l 127.0.0.1 -p "$mc_port" -U 0 -m 256 -t 2 "${user[@]}" &
mc_pid=$!
trap 'kill "$mc_pid" 2>/dev/null || true; cleanup' EXIT
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$mc_port") 2>/dev/null && break
  sleep 0.05
done

echo "| algorithm | keys | Redis decisions/s | Redis p99 | Memcached decisions/s | Memcached p99 | Memcached / Redis | cas conflicts per decision / exhausted |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for algorithm in fixed_window gcra; do
  for keys in 100000 1; do
    r=$("$load" --url "redis://127.0.0.1:$port" --algorithm "$algorithm" --keys "$keys" \
          --inflight "$inflight" --duration "$duration")
    m=$("$load" --url "memcached://127.0.0.1:$mc_port" --algorithm "$algorithm" --keys "$keys" \
          --inflight "$inflight" --duration "$duration")
    read -r _ r_rate _ _ _ r_p99 _ r_err _ <<<"$r"
    read -r _ m_rate _ _ _ m_p99 _ m_err _ m_conflicts <<<"$m"
    ratio=$(python3 -c "print(f'{$m_rate / $r_rate:.2f}x')")
    label=$([[ $keys == 1 ]] && echo "1 (hot)" || echo "$keys (cold)")
    echo "| $algorithm | $label | $r_rate | $r_p99 | $m_rate | $m_p99 | $ratio | $m_conflicts |"
    [[ $r_err == 0 && $m_err == 0 ]] || echo "errors: redis $r_err, memcached $m_err" >&2
  done
done
