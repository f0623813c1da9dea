#!/usr/bin/env bash
# User-space instructions per POST /v1/check, the whole sluiced process under callgrind: a
# count that, unlike requests per second on a shared machine, does not move from run to run,
# so two builds compare at a glance (bench/http/README.md).
#
#   bench/http/instructions.sh [--sluiced PATH] [--mode adhoc|rules] [--keep]
#
# sluiced runs with one event loop under valgrind; wrk -t1 -c8 warms it up for 2 s, the
# counters are zeroed, wrk runs 5 s more, and the instructions counted are divided by the
# requests wrk completed. --keep leaves the callgrind file for callgrind_annotate.
# Needs valgrind (callgrind_control) and wrk.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
sluiced="$root/build/bin/sluiced"
mode=adhoc
keep=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sluiced) sluiced=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "instructions.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for tool in valgrind callgrind_control wrk; do
  command -v "$tool" >/dev/null || { echo "instructions.sh: $tool not found" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-instructions.XXXXXX")
pid=
cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then kill "$pid"; wait "$pid" 2>/dev/null || true; fi
  if [[ $keep == 1 ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

cat >"$work/rules.yaml" <<'EOF_RULES'
domain: bench
descriptors:
  - key: user
    rate_limit: {algorithm: gcra, requests_per_unit: 100000, unit: second}
EOF_RULES
# Names uncompressed: the file dumped after the warm-up then stands alone for callgrind_annotate.
valgrind --tool=callgrind --compress-strings=no --compress-pos=no \
  --callgrind-out-file="$work/callgrind.out" "$sluiced" \
  --config "$work/rules.yaml" --http 127.0.0.1:0 --grpc 127.0.0.1:0 --threads 1 \
  --watch-interval 0 >"$work/sluiced.log" 2>&1 &
pid=$!
port=
for _ in $(seq 300); do
  port=$(grep -o 'listening on http://127\.0\.0\.1:[0-9]*' "$work/sluiced.log" | grep -o '[0-9]*$' || true)
  [[ -n $port ]] && break
  kill -0 "$pid" 2>/dev/null || { echo "instructions.sh: sluiced exited:" >&2; cat "$work/sluiced.log" >&2; exit 1; }
  sleep 0.1
done
[[ -n $port ]] || { echo "instructions.sh: sluiced did not start" >&2; exit 1; }

url="http://127.0.0.1:$port/v1/check"
SLUICE_BENCH_MODE=$mode wrk -t1 -c8 -d2s -s "$here/check.lua" "$url" >/dev/null
callgrind_control -z "$pid" >/dev/null 2>&1
requests=$(SLUICE_BENCH_MODE=$mode wrk -t1 -c8 -d5s -s "$here/check.lua" "$url" |
  awk '/requests in/ {print $1}')
callgrind_control -d "$pid" >/dev/null 2>&1
sleep 0.5
instructions=$(awk '/^summary:/ {print $2}' "$work/callgrind.out.1")
echo "$mode: $((instructions / requests)) instructions per request ($requests requests, $(basename "$sluiced"))"
