#!/usr/bin/env bash
# The Envoy API's cost per call, A/B in one sitting: each sluiced binary given (and, unless
# --no-reference, envoyproxy/ratelimit from ../shared/peers/envoy-ratelimit) asked by
# sluice_grpc_load with 64 calls in flight, in interleaved rounds, one rule high enough that
# every call is admitted (bench/peers/table.py runs it for its gRPC rows). Each run prints calls/s and the
# server's CPU per call (utime+stime of its process over the run); the end prints each
# server's medians and their ratios to the first sluiced and to the reference.
#
#   bench/grpc/ab.sh [--rounds 5] [--duration 10] [--store redis|memory|both]
#                    [--concurrency 64] [--channels 2] [--no-reference] [NAME=]SLUICED...
#
# --channels 1000 --concurrency 1000: a thousand connections of one call each, as many Envoy
# sidecars would connect (raise `ulimit -n` first).
#
# e.g. bench/grpc/ab.sh old=/tmp/sluiced.old new=build/bin/sluiced
# A NAME=ENV=VALUE:PATH form is not offered: set what a binary needs with env(1) in a wrapper.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PEER=${PEER:-$ROOT/../shared/peers/envoy-ratelimit}
[ -d "$PEER" ] || PEER=$ROOT/../../shared/peers/envoy-ratelimit  # From a worktree in /work/wt/.
LOAD=${LOAD:-$ROOT/build/bin/sluice_grpc_load}
rounds=5 duration=10 stores="redis memory" reference=1 concurrency=64 channels=2
bins=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --channels) channels=$2; shift 2 ;;
    --store) [ "$2" = both ] && stores="redis memory" || stores=$2; shift 2 ;;
    --no-reference) reference=; shift ;;
    -*) echo "ab.sh: unknown argument $1" >&2; exit 2 ;;
    *) bins+=("$1"); shift ;;
  esac
done
[ ${#bins[@]} -gt 0 ] || bins=("new=$ROOT/build/bin/sluiced")
[ -n "$reference" ] && [ ! -x "$PEER/run.sh" ] && { echo "ab.sh: no $PEER/run.sh (--no-reference?)" >&2; exit 1; }
CONF=$(mktemp -d)
trap 'rm -rf "$CONF"' EXIT
# One rule that admits everything, as bench/grpc/run.sh and bench/peers/ use.
printf '%s\n' 'domain: bench' 'descriptors:' '  - key: user' \
  '    rate_limit: {unit: second, requests_per_unit: 1000000}' > "$CONF/bench.yaml"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
# one PID ADDR LABEL: a run against the server PID at ADDR; appends "LABEL calls/s us/call".
one() {
  local before after out calls secs
  before=$(cpu "$1")
  out=$("$LOAD" --target "$2" --domain bench --concurrency "$concurrency" \
    --channels "$channels" --duration "$duration" 2>&1)
  after=$(cpu "$1")
  calls=$(echo "$out" | sed -n 's/^calls \([0-9]*\) in \([0-9.]*\) s.*/\1/p')
  secs=$(echo "$out" | sed -n 's/^calls \([0-9]*\) in \([0-9.]*\) s.*/\2/p')
  [ -n "$calls" ] && [ "$calls" -gt 0 ] || { echo "$3: no calls: $out" >&2; return; }
  awk -v l="$3" -v c="$calls" -v s="$secs" -v t=$((after - before)) -v o="$out" 'BEGIN {
    printf "%-22s %8.0f calls/s %7.1f us CPU/call | %s\n", l, c / s, t * 10000 / c, o }' >&2
  awk -v l="$3" -v c="$calls" -v s="$secs" -v t=$((after - before)) \
    'BEGIN { printf "%s %.0f %.2f\n", l, c / s, t * 10000 / c }' >> "$CONF/results"
}
export -f one cpu
export LOAD duration CONF concurrency channels
for round in $(seq "$rounds"); do
  echo "round $round" >&2
  if [ -n "$reference" ] && [[ " $stores " == *" redis "* ]]; then
    "$PEER/run.sh" "$CONF" -- bash -c 'one "$RL_PID" "$RL_GRPC_ADDR" reference-redis' >/dev/null 2>&1
  fi
  for store in $stores; do
    for b in "${bins[@]}"; do
      name=${b%%=*}; bin=${b#*=}; [ "$name" = "$b" ] && name=$(basename "$b")
      d=$(mktemp -d)
      url=memory rport=
      if [ "$store" = redis ]; then
        rport=$(free_port)
        redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$d" \
          --daemonize yes --logfile "$d/r.log"
        for _ in $(seq 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.05; done
        url=redis://127.0.0.1:$rport
      fi
      "$bin" --config "$CONF" --http 127.0.0.1:0 --grpc 127.0.0.1:0 --threads 2 \
        --store "$url" 2> "$d/log" &
      pid=$!
      g=
      for _ in $(seq 100); do
        g=$(grep -o 'grpc://127.0.0.1:[0-9]*' "$d/log" | grep -o '[0-9]*$') && break
        sleep 0.05
      done
      curl -s -o /dev/null --retry 20 --retry-connrefused --retry-delay 0 \
        "http://$(grep -o 'http://127.0.0.1:[0-9]*' "$d/log" | head -1 | cut -d/ -f3)/healthz" || true
      one "$pid" "127.0.0.1:$g" "$name-$store"
      kill "$pid"; wait "$pid" 2>/dev/null
      [ -n "$rport" ] && redis-cli -p "$rport" shutdown nosave >/dev/null 2>&1
      rm -rf "$d"
    done
  done
done
echo "medians over $rounds rounds ($(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)):"
first=${bins[0]%%=*}; [ "$first" = "${bins[0]}" ] && first=$(basename "${bins[0]}")
python3 - "$CONF/results" "$first" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
first = sys.argv[2]
med = {}
for label in dict.fromkeys(r[0] for r in rows):
    mine = [r for r in rows if r[0] == label]
    med[label] = (statistics.median(float(r[1]) for r in mine),
                  statistics.median(float(r[2]) for r in mine))
for label, (rate, us) in med.items():
    store = label.rsplit('-', 1)[1]
    line = f"{label:22} {rate:8.0f} calls/s {us:6.1f} us CPU/call"
    base = med.get(f"{first}-{store}")
    if base and not label.startswith(first + '-') and not label.startswith('reference-'):
        line += f" | vs {first}: x{rate / base[0]:.2f} calls/s, x{us / base[1]:.2f} CPU"
    ref = med.get("reference-redis")
    if ref and store == "redis" and label != "reference-redis":
        line += f" | vs reference: x{rate / ref[0]:.2f} calls/s, 1/{ref[1] / us:.2f} CPU"
    print(line)
PY
