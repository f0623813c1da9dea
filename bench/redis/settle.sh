#!/usr/bin/env bash
# Issue 33's benchmark: a check with a receipt plus its settle against a check alone, through
# RedisStore on one redis-server of its own, in one sitting. For each number of calls in
# flight, plain (sluice_redis_load: DecideAllAsync, cost 1) then settle (--settle:
# ChargeAllAsync, cost 4, then SettleAllAsync at a random real cost of 0 to 8, a `once` of its
# own), each on the store unbatched (--batch 1: a script call per store call) and on the
# store's defaults (2 connections, batches of up to 32). A decision is one check, with its
# settle. Columns: decisions/s; script calls and store calls per decision
# (RedisStoreStats::script_calls and calls, before and after); EVALSHA per decision as Redis
# counts them (INFO commandstats; the run's 100 warm-up calls included); Redis's CPU per
# decision (INFO cpu: used_cpu_user + used_cpu_sys, warm-up included); p99 (of the check with
# its settle); and on each settle row its ratios to the plain row before it. The settle
# must cost at most one more script call per decision.
#
#   bench/redis/settle.sh [--duration 3] [--rounds 1] [--inflight "1 16 64"]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
duration=3 rounds=1 inflights="1 16 64"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --inflight) inflights=$2; shift 2 ;;
    *) echo "settle.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
load="$root/build/bin/sluice_redis_load"
[[ -x "$load" ]] || { echo "settle.sh: build first (make build)" >&2; exit 1; }
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

# One run: mode (plain, settle), store (unbatched, batched), calls in flight ->
# "decisions/s script_calls/dec store_calls/dec evalsha/dec redis_cpu_us/dec p99_us errors"
run() {
  local flags=(--url "redis://127.0.0.1:$port" --duration "$duration" --inflight "$3")
  [[ $1 == settle ]] && flags+=(--settle)
  if [[ $2 == unbatched ]]; then
    flags+=(--connections 1 --pipeline 16 --batch 1)
  else
    flags+=(--connections 2 --pipeline 16 --batch 32)
  fi
  local before cpu0 out after cpu1
  before=$(evalsha_calls) cpu0=$(redis_cpu)
  out=$("$load" "${flags[@]}") || true  # errors are counted in the line
  after=$(evalsha_calls) cpu1=$(redis_cpu)
  awk -v out="$out" -v evalsha="$((after - before))" -v cpu0="$cpu0" -v cpu1="$cpu1" '
    BEGIN {
      n = split(out, f, " +")
      for (i = 1; i <= n; ++i) {
        if (f[i] == "decisions/s") dps = f[i - 1]
        if (f[i] == "p99") p99 = f[i + 1]
        if (f[i] == "errors") errors = f[i + 1]
        if (f[i] == "script" && f[i + 2] == "per") scripts = f[i - 1]
        if (f[i] == "store" && f[i + 2] == "per") stores = f[i - 1]
        if (f[i] == "decisions" && i == n) decisions = f[i - 1]
      }
      if (decisions == 0) decisions = 1
      printf "%d %s %s %.3f %.2f %d %d\n", dps, scripts, stores, evalsha / decisions,
        (cpu1 - cpu0) * 1e6 / decisions, p99, errors
    }'
}

echo "redis-server $(redis-server --version | grep -o 'v=[0-9.]*'), $(nproc) cores;" \
  "${duration}s per run; gcra 1,000,000/s on 100,000 keys (every check admitted)"
row='%-6s %-9s %-6s %9s %12s %11s %10s %12s %16s %8s %7s  %s\n'
# shellcheck disable=SC2059
printf "$row" round store mode in_flight decisions/s script/dec store/dec evalsha/dec \
  redis_cpu_us/dec p99_us errors \
  'settle / plain'
for r in $(seq "$rounds"); do
  for store in unbatched batched; do
    for inflight in $inflights; do
      read -r p_dps p_scr p_sto p_ev p_cpu p_p99 p_err < <(run plain "$store" "$inflight")
      # shellcheck disable=SC2059
      printf "$row" "$r" "$store" plain "$inflight" "$p_dps" "$p_scr" "$p_sto" "$p_ev" "$p_cpu" \
        "$p_p99" "$p_err" ''
      read -r s_dps s_scr s_sto s_ev s_cpu s_p99 s_err < <(run settle "$store" "$inflight")
      ratio=$(awk -v a="$p_dps" -v b="$s_dps" -v c="$p_scr" -v d="$s_scr" -v u="$p_cpu" -v v="$s_cpu" \
        -v p="$p_p99" -v q="$s_p99" 'BEGIN {
          printf "decisions/s %.2fx, script calls/dec %+.3f, Redis CPU/dec %.2fx, p99 %.2fx",
            b / a, d - c, (u > 0 ? v / u : 0), (p > 0 ? q / p : 0) }')
      # shellcheck disable=SC2059
      printf "$row" "$r" "$store" settle "$inflight" "$s_dps" "$s_scr" "$s_sto" "$s_ev" "$s_cpu" \
        "$s_p99" "$s_err" "$ratio"
    done
  done
done
