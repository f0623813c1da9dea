#!/usr/bin/env bash
# Replays the same generated ShouldRateLimit requests to envoyproxy/ratelimit (the reference
# build in ../shared/peers/envoy-ratelimit, which a clone of sluice does not have) and to
# sluiced, one rules file at a time, and prints the mismatches per file. Not a test: it needs
# the reference. Windows line up with clock seconds in both: a per-second rule whose replay
# crosses a second can differ; replay it again.
#
#   bench/peers/compare.sh [--requests 150] [--seed 1] [-- SLUICED_FLAGS...]  (FILES... or all
#   of tests/data/envoy-ratelimit); their settings pass through the environment, e.g.
#   SHADOW_MODE=true bench/peers/compare.sh -- --shadow-mode
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
peer=${PEER:-$root/../shared/peers/envoy-ratelimit}
requests=150 seed=1 files=() flags=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --requests) requests=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --) shift; flags=("$@"); break ;;
    *) files+=("$1"); shift ;;
  esac
done
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
  "$root/build/bin/sluiced" --config "$d" --http 127.0.0.1:0 --grpc 127.0.0.1:0 --threads 1 \
    ${flags[@]+"${flags[@]}"} 2> "$d/log" &
  pid=$! port=
  for _ in $(seq 100); do
    port=$(grep -o 'grpc://127.0.0.1:[0-9]*' "$d/log" | grep -o '[0-9]*$')
    [[ -n "$port" ]] && break
    sleep 0.05
  done
  if [[ -z "$port" ]]; then
    echo "$f: sluiced did not start: $(tail -1 "$d/log")"
  else
    echo "$f: $("$peer/run.sh" "$d" -- /usr/bin/python3 "$peer/client/rls_client.py" \
      --addr2 "127.0.0.1:$port" --replay "$d/requests.jsonl" --strip-reset 2>&1 |
      grep -E '^compared' | tail -1)"
  fi
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  rm -rf "$d"
done
