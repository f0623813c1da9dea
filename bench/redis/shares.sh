#!/usr/bin/env bash
# Quota leasing against exact mode: one hot key decided through 3 RedisStores (standing for 3
# servers) on one redis-server of its own, 64 decisions in flight, in rounds that alternate
# the two modes in one sitting. For each run: decisions/s and p99 (sluice_redis_load), and
# Redis's side from INFO (commandstats' EVALSHA calls, used_cpu_user + used_cpu_sys) per
# decision. The limit (gcra, 1,000,000 per second) admits every call, so the key stays far
# from its limit, where leasing answers from shares.
#
#   bench/redis/shares.sh [--duration 5] [--rounds 2] [--share-max 1000] [--share-ttl-ms 100]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
duration=5 rounds=2 share_max=1000 share_ttl_ms=100
while [[ $# -gt 0 ]]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --share-max) share_max=$2; shift 2 ;;
    --share-ttl-ms) share_ttl_ms=$2; shift 2 ;;
    *) echo "shares.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
load="$root/build/bin/sluice_redis_load"
[[ -x "$load" ]] || { echo "shares.sh: build first (make build)" >&2; exit 1; }
# shellcheck source=bench/redis/redis_server.sh
source "$root/bench/redis/redis_server.sh"

evalsha_calls() {
  redis-cli -p "$port" info commandstats | tr -d '\r' |
    awk -F'[:=,]' '/^cmdstat_evalsha:/ { print $3; found = 1 } END { if (!found) print 0 }'
}
redis_cpu() {
  redis-cli -p "$port" info cpu | tr -d '\r' |
    awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'
}

# One run: mode (exact or shares) -> "decisions/s p99_us redis_calls_per_decision redis_cpu_us_per_decision"
run() {
  local flags=(--url "redis://127.0.0.1:$port" --duration "$duration" --keys 1 --stores 3
               --inflight 64 --connections 2)
  [[ $1 == shares ]] && flags+=(--share-max "$share_max" --share-ttl-ms "$share_ttl_ms")
  local calls0 cpu0 out calls1 cpu1
  calls0=$(evalsha_calls) cpu0=$(redis_cpu)
  out=$("$load" "${flags[@]}")
  calls1=$(evalsha_calls) cpu1=$(redis_cpu)
  awk -v out="$out" -v c="$((calls1 - calls0))" -v cpu="$cpu1" -v cpu0="$cpu0" -v d="$duration" '
    BEGIN {
      n = split(out, f, " +")
      for (i = 1; i <= n; ++i) {
        if (f[i] == "decisions/s") dps = f[i - 1]
        if (f[i] == "p99") p99 = f[i + 1]
      }
      decisions = dps * d
      printf "%d %d %.5f %.3f\n", dps, p99, c / decisions, (cpu - cpu0) * 1e6 / decisions
    }'
}

echo "redis-server $(redis-server --version | grep -o 'v=[0-9.]*'), $(nproc) cores; one hot key," \
  "3 stores, 64 in flight, ${duration}s per run; shares: max $share_max, ttl ${share_ttl_ms}ms"
printf '%-6s %-7s %14s %9s %16s %16s\n' round mode decisions/s p99_us redis_calls/dec redis_cpu_us/dec
for r in $(seq "$rounds"); do
  read -r e_dps e_p99 e_calls e_cpu < <(run exact)
  printf '%-6s %-7s %14s %9s %16s %16s\n' "$r" exact "$e_dps" "$e_p99" "$e_calls" "$e_cpu"
  read -r s_dps s_p99 s_calls s_cpu < <(run shares)
  printf '%-6s %-7s %14s %9s %16s %16s\n' "$r" shares "$s_dps" "$s_p99" "$s_calls" "$s_cpu"
  awk -v r="$r" -v a="$e_dps" -v b="$s_dps" -v p="$e_p99" -v q="$s_p99" -v c="$e_calls" -v e="$s_calls" \
      -v u="$e_cpu" -v v="$s_cpu" 'BEGIN {
    printf "round %s ratios (shares / exact): decisions/s %.1fx, p99 %.2fx, Redis calls per decision %.4fx (%.0fx fewer), Redis CPU per decision %.4fx\n",
      r, b / a, (p > 0 ? q / p : 0), e / c, c / e, v / u }'
done
