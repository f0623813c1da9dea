#!/usr/bin/env bash
# The memory store's bytes per key, end to end: sluiced's resident memory before and after it
# learns N distinct ad-hoc gcra keys over HTTP, divided by the keys its store then holds.
#
#   bench/http/bytes_per_key.sh [--keys 1000000] [--sluiced PATH] [--memory-bench PATH]
#                               [--connections 64] [--threads 2] [--timeout 600] [--keep]
#
# 1. starts sluiced --threads 2 --max-keys 0 on a free port of 127.0.0.1;
# 2. warms it up: one cost-1 check of "warmup-000000000" (limit 10 per 1h: the limit's table
#    and one key), then 1 s of wrk sending cost-0 checks of that key on every connection (the
#    whole request path; cost 0 adds no state); then reads VmRSS and sluice_store_keys;
# 3. wrk (bench/http/fill.lua) sends N checks {"key": "client-000000000" ... "client-<N-1>",
#    "algorithm": "gcra", "limit": 10, "period": "1h", "cost": 1}: each key once, each wrk
#    thread its own disjoint range. A thread whose keys are all sent sends GET /healthz (no
#    store state) until the answers to its keys are in, then stops; the script then stops wrk
#    with SIGINT. 10 per hour keeps every key's state live for the whole run;
# 4. reads VmRSS and /metrics again and checks that the store grew by exactly N keys, that
#    sluice_rule_checks_total{rule="adhoc"} grew by exactly N (so no key was sent twice),
#    that all N checks were answered 200 and that nothing was reclaimed or evicted;
# 5. prints keys sent, keys held, RSS before/after (MiB), bytes per key
#    = (RSS after - RSS before) / keys added, and the library's own figure from
#    `sluice_memory_bench --keys N gcra` (a MemoryStore in-process, no server) beside it.
#
# Exit status 0 when every check held, 1 otherwise (the figures are printed either way).
# Needs wrk and curl. sluiced is stopped on exit, whatever happens.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
sluiced="$root/build/bin/sluiced"
memory_bench="$root/build/bin/sluice_memory_bench"
keys=1000000
connections=64
wrk_threads=2
timeout=600
keep=0

while [[ $# -gt 0 ]]; do
  case "$1" in
    --keys) keys=$2; shift 2 ;;
    --sluiced) sluiced=$2; shift 2 ;;
    --memory-bench) memory_bench=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --threads) wrk_threads=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bytes_per_key.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

[[ $keys =~ ^[1-9][0-9]*$ ]] || { echo "bytes_per_key.sh: --keys wants a positive integer" >&2; exit 2; }
(( keys < 100000000000000000 )) || { echo "bytes_per_key.sh: keys would pass 24 characters" >&2; exit 2; }
(( connections >= wrk_threads )) || { echo "bytes_per_key.sh: --connections < --threads" >&2; exit 2; }
for tool in wrk curl; do
  command -v "$tool" >/dev/null || { echo "bytes_per_key.sh: $tool not found" >&2; exit 1; }
done
[[ -x "$sluiced" ]] || { echo "bytes_per_key.sh: no sluiced at $sluiced (build it first)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bytes-per-key.XXXXXX")
sluiced_pid=""
wrk_pid=""

stop_pid() {  # PID: SIGTERM, up to 5 s, then SIGKILL
  local pid=$1
  [[ -n $pid ]] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  stop_pid "$wrk_pid"
  stop_pid "$sluiced_pid"
  if [[ $keep == 1 ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() { echo "bytes_per_key.sh: $*" >&2; exit 1; }

rss_kib() { awk '$1 == "VmRSS:" {print $2}' "/proc/$sluiced_pid/status"; }

metrics() { curl -sf --max-time 10 "http://127.0.0.1:$port/metrics" >"$work/metrics.txt"; }
metric() {  # NAME (exact, labels included) from the last metrics()
  awk -v name="$1" '$1 == name {print $2; found = 1} END {if (!found) print "missing"}' \
    "$work/metrics.txt"
}

mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }

# 1. sluiced, on the kernel's free port, read back from its log.
"$sluiced" --http 127.0.0.1:0 --grpc 127.0.0.1:0 --threads 2 --max-keys 0 --watch-interval 0 --log-level info \
  >"$work/sluiced.log" 2>&1 &
sluiced_pid=$!
port=""
for _ in $(seq 200); do
  port=$(grep -o 'listening on http://127\.0\.0\.1:[0-9]*' "$work/sluiced.log" | grep -o '[0-9]*$' || true)
  [[ -n $port ]] && break
  kill -0 "$sluiced_pid" 2>/dev/null || break
  sleep 0.05
done
[[ -n $port ]] || { cat "$work/sluiced.log" >&2; fail "sluiced did not start"; }
url="http://127.0.0.1:$port"
curl -sf --max-time 5 --retry 20 --retry-connrefused --retry-delay 0 "$url/healthz" >/dev/null \
  || fail "sluiced does not answer /healthz"

# 2. Warm-up: one key under the run's limit, then cost-0 checks of it on every connection.
status=$(curl -s --max-time 5 -o "$work/probe.json" -w '%{http_code}' -X POST \
  -H 'Content-Type: application/json' \
  -d '{"key":"warmup-000000000","algorithm":"gcra","limit":10,"period":"1h","cost":1}' \
  "$url/v1/check")
[[ $status == 200 ]] || fail "warm-up POST /v1/check answered $status: $(cat "$work/probe.json")"
wrk -t"$wrk_threads" -c"$connections" -d1s -s "$here/fill.lua" "$url" -- warm \
  >"$work/wrk-warm.txt" 2>&1 || { cat "$work/wrk-warm.txt" >&2; fail "warm-up wrk failed"; }
grep -q 'Non-2xx\|Socket errors' "$work/wrk-warm.txt" && { cat "$work/wrk-warm.txt" >&2; fail "warm-up wrk saw errors"; }
sleep 0.5

metrics
keys_before=$(metric sluice_store_keys)
checks_before=$(metric 'sluice_rule_checks_total{rule="adhoc"}')
rss_before=$(rss_kib)

# 3. The fill: N fresh keys, each exactly once. -d is only an upper bound: the threads stop
# themselves once their ranges are answered, and wrk's main thread is then woken by SIGINT.
mkdir "$work/done"
echo "sluiced $url (pid $sluiced_pid, --threads 2 --max-keys 0); wrk -t$wrk_threads -c$connections:" \
  "sending $keys keys..." >&2
start_ns=$(date +%s%N)
wrk -t"$wrk_threads" -c"$connections" -d"${timeout}s" -s "$here/fill.lua" "$url" \
  -- fill "$keys" "$work/done" "$wrk_threads" >"$work/wrk-fill.txt" 2>&1 &
wrk_pid=$!
finished=0
while kill -0 "$wrk_pid" 2>/dev/null; do
  if (( $(find "$work/done" -name 'thread-*' | wc -l) == wrk_threads )); then finished=1; break; fi
  sleep 0.1
done
fill_s=$(awk -v a="$start_ns" -v b="$(date +%s%N)" 'BEGIN {printf "%.1f", (b - a) / 1e9}')
if (( finished )); then kill -INT "$wrk_pid" 2>/dev/null || true; fi
wait "$wrk_pid" || true
wrk_pid=""
(( finished )) || { cat "$work/wrk-fill.txt" >&2; fail "wrk ended before every thread had its answers (lost requests?)"; }
sleep 0.5

# 4. After.
rss_after=$(rss_kib)
metrics
keys_after=$(metric sluice_store_keys)
checks_after=$(metric 'sluice_rule_checks_total{rule="adhoc"}')
reclaimed=$(metric sluice_store_reclaimed_total)
evicted=$(metric sluice_store_evicted_total)
store_errors=$(metric sluice_store_errors_total)
read -r sent ok other first_other < <(awk '{s += $4; o += $5; x += $6; if ($7 != "-") f = $7}
  END {print s, o, x, (f == "" ? "-" : f)}' "$work"/done/thread-*)

keys_held=$(( keys_after - keys_before ))
checks=$(( checks_after - checks_before ))
problems=()
(( sent == keys )) || problems+=("wrk sent $sent keys, not $keys")
(( ok == keys && other == 0 )) || problems+=("$ok checks answered 200, $other otherwise (first: $first_other)")
(( checks == keys )) || problems+=("sluice_rule_checks_total grew by $checks, not $keys")
(( keys_held == keys )) || problems+=("the store grew by $keys_held keys, not $keys")
[[ $reclaimed == 0 && $evicted == 0 && $store_errors == 0 ]] \
  || problems+=("store reclaimed $reclaimed, evicted $evicted, errors $store_errors")
grep -q 'Socket errors' "$work/wrk-fill.txt" && problems+=("wrk: $(grep 'Socket errors' "$work/wrk-fill.txt" | xargs)")

# 5. The figures.
rps=$(awk -v n="$keys" -v s="$fill_s" 'BEGIN {printf "%.0f", n / s}')
bpk=$(awk -v a="$rss_after" -v b="$rss_before" -v n="$keys_held" \
  'BEGIN {if (n > 0) printf "%.1f", (a - b) * 1024 / n; else print "n/a"}')
echo "keys sent:        $sent distinct (client-%09d, 16 characters; gcra 10 per 1h, cost 1)" \
  "in ${fill_s} s (~$rps/s)"
echo "keys held:        $keys_held added (sluice_store_keys $keys_before -> $keys_after;" \
  "checks_total +$checks, 200s $ok, other $other)"
echo "RSS before:       $(mib "$rss_before") MiB ($rss_before kB VmRSS)"
echo "RSS after:        $(mib "$rss_after") MiB ($rss_after kB VmRSS), +$(mib $(( rss_after - rss_before ))) MiB"
echo "bytes per key:    $bpk (sluiced over HTTP)"
if [[ -x "$memory_bench" ]]; then
  lib=$("$memory_bench" --keys "$keys" gcra)
  echo "library:          $(grep -o '[0-9.]* bytes/key' <<<"$lib" || echo '?') (sluice_memory_bench --keys $keys gcra)"
  echo "                  $lib"
else
  echo "library:          no sluice_memory_bench at $memory_bench"
fi

if (( ${#problems[@]} )); then
  printf 'CHECK FAILED: %s\n' "${problems[@]}"
  exit 1
fi
echo "checks: ok (every key sent once, answered 200, held by the store; nothing reclaimed or evicted)"
