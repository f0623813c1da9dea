#!/usr/bin/env bash
# The HTTP benchmark: wrk on loopback against
#   1. nginx answering `return 204;` with worker_processes 1, then 2 (the baseline: what a
#      minimal HTTP/1.1 keep-alive server does on this machine),
#   2. sluiced (--threads 2) answering POST /v1/check (bench/http/check.lua: keys spread over
#      10,000 users, so every request is admitted),
# and prints requests/s, p50 and p99 for each, and sluiced's ratio to nginx's.
#
#   bench/http/run.sh [--sluiced PATH] [--nginx PATH] [--duration 10s] [--mode adhoc|rules]
#                     [--connections 64] [--threads 2] [--warmup 2s] [--redis] [--keep]
#
# --redis: sluiced on the Redis store, a redis-server of its own on a free port.
#
# Needs wrk (Debian: apt-get install -y wrk), nginx and python3 (free ports). Every server
# listens on 127.0.0.1 on a port free at start; all of them are stopped on exit. wrk and the
# servers share the machine's cores, so figures vary from run to run: compare within a run.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
sluiced="$root/build/bin/sluiced"
nginx=nginx
duration=10s
warmup=2s
mode=adhoc
connections=64
wrk_threads=2
keep=0
redis=0
redis_port=

while [[ $# -gt 0 ]]; do
  case "$1" in
    --sluiced) sluiced=$2; shift 2 ;;
    --nginx) nginx=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --threads) wrk_threads=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --redis) redis=1; shift ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

for tool in wrk "$nginx" python3; do
  if ! command -v "$tool" >/dev/null; then
    echo "run.sh: $tool not found" >&2
    [[ $tool == wrk ]] && echo "  Debian: apt-get install -y wrk" >&2
    exit 1
  fi
done
[[ -x "$sluiced" ]] || { echo "run.sh: no sluiced at $sluiced (build it first)" >&2; exit 1; }
case "$mode" in adhoc|rules) ;; *) echo "run.sh: --mode adhoc or rules" >&2; exit 2 ;; esac

work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-http.XXXXXX")
pids=()

cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  done
  pids=()
  if [[ -n $redis_port ]]; then
    redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
  fi
  if [[ $keep == 1 ]]; then
    echo "kept $work" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_port() {  # PORT PID LOG
  for _ in $(seq 200); do
    if ! kill -0 "$2" 2>/dev/null; then
      echo "run.sh: server exited:" >&2; cat "$3" >&2; exit 1
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "run.sh: nothing listens on $1:" >&2; cat "$3" >&2; exit 1
}

stop_last() {  # stops the most recently started server
  local pid=${pids[-1]}
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  unset 'pids[-1]'
}

# wrk NAME URL [wrk args...]: a warm-up run (discarded), then the measured one into NAME.txt.
bench() {
  local name=$1 url=$2; shift 2
  if [[ $warmup != 0 && $warmup != 0s ]]; then
    wrk -t"$wrk_threads" -c"$connections" -d"$warmup" "$@" "$url" >/dev/null
  fi
  wrk -t"$wrk_threads" -c"$connections" -d"$duration" --latency "$@" "$url" >"$work/$name.txt"
}

start_nginx() {  # WORKERS -> sets port
  local workers=$1 prefix="$work/nginx$1"
  mkdir -p "$prefix"
  port=$(free_port)
  cat >"$prefix/nginx.conf" <<EOF
worker_processes $workers;
pid $prefix/nginx.pid;
error_log $prefix/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $prefix/client_body_temp;
    proxy_temp_path $prefix/proxy_temp;
    fastcgi_temp_path $prefix/fastcgi_temp;
    uwsgi_temp_path $prefix/uwsgi_temp;
    scgi_temp_path $prefix/scgi_temp;
    keepalive_requests 100000000;  # sluiced has no such limit either
    keepalive_timeout 60s;
    server {
        listen 127.0.0.1:$port;
        location / { return 204; }
    }
}
EOF
  "$nginx" -p "$prefix/" -c "$prefix/nginx.conf" -g 'daemon off;' >"$prefix/out.log" 2>&1 &
  pids+=($!)
  wait_port "$port" "$!" "$prefix/out.log"
}

start_sluiced() {  # -> sets port
  local store=(--store memory)
  if [[ $redis == 1 ]]; then
    redis_port=$(free_port)
    redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
      --logfile "$work/redis.log" --daemonize yes
    for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.05; done
    store=(--store "redis://127.0.0.1:$redis_port")
  fi
  cat >"$work/rules.yaml" <<'EOF'
domain: bench
descriptors:
  - key: user
    rate_limit: {algorithm: gcra, requests_per_unit: 100000, unit: second}
EOF
  # --http 127.0.0.1:0: the kernel's free port, read back from the log. (sluiced binds with
  # SO_REUSEPORT, so a port chosen beforehand could end up shared with another sluiced.)
  "$sluiced" --config "$work/rules.yaml" --http 127.0.0.1:0 --grpc 127.0.0.1:0 --threads 2 --log-level info \
    --watch-interval 0 "${store[@]}" >"$work/sluiced.log" 2>&1 &
  pids+=($!)
  port=""
  for _ in $(seq 200); do
    port=$(grep -o 'listening on http://127\.0\.0\.1:[0-9]*' "$work/sluiced.log" | grep -o '[0-9]*$' || true)
    [[ -n $port ]] && break
    kill -0 "$!" 2>/dev/null || break
    sleep 0.05
  done
  [[ -n $port ]] || { echo "run.sh: sluiced did not start:" >&2; cat "$work/sluiced.log" >&2; exit 1; }
  wait_port "$port" "$!" "$work/sluiced.log"
  # One request by hand: the body must be admitted (200), or the figures mean nothing.
  local status
  status=$(python3 - "$port" "$mode" <<'EOF'
import http.client, json, sys
port, mode = int(sys.argv[1]), sys.argv[2]
body = ({"domain": "bench", "descriptors": [{"entries": [{"key": "user", "value": "probe"}]}]}
        if mode == "rules" else
        {"key": "user:probe", "algorithm": "gcra", "limit": 100000, "period": "1s"})
c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
c.request("POST", "/v1/check", json.dumps(body), {"Content-Type": "application/json"})
r = c.getresponse()
print(r.status, r.read().decode()[:200])
EOF
)
  [[ $status == 200* ]] || { echo "run.sh: probe POST /v1/check answered $status" >&2; exit 1; }
}

echo "wrk -t$wrk_threads -c$connections -d$duration --latency (keep-alive, 127.0.0.1), $(nproc) cores," \
  "warm-up $warmup each" >&2

start_nginx 1
echo "nginx return 204, worker_processes 1: port $port" >&2
bench nginx1 "http://127.0.0.1:$port/"
stop_last

start_nginx 2
echo "nginx return 204, worker_processes 2: port $port" >&2
bench nginx2 "http://127.0.0.1:$port/"
stop_last

start_sluiced
echo "sluiced --threads 2 --store ${redis_port:+redis://127.0.0.1:}${redis_port:-memory}, POST /v1/check ($mode): port $port" >&2
SLUICE_BENCH_MODE=$mode bench sluiced "http://127.0.0.1:$port" -s "$here/check.lua"
stop_last

# The summary, from wrk's outputs.
python3 - "$work" "$mode" <<'EOF'
import re, sys

work, mode = sys.argv[1], sys.argv[2]
UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}

def ms(text):
    m = re.fullmatch(r"([0-9.]+)(us|ms|s|m)", text)
    return float(m.group(1)) * UNITS[m.group(2)]

def parse(name):
    text = open(f"{work}/{name}.txt").read()
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", text).group(1))
    p50 = ms(re.search(r"^\s+50%\s+(\S+)", text, re.M).group(1))
    p99 = ms(re.search(r"^\s+99%\s+(\S+)", text, re.M).group(1))
    total = int(re.search(r"(\d+) requests in", text).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    errors = re.search(r"Socket errors:.*", text)
    return {"rps": rps, "p50": p50, "p99": p99, "total": total,
            "non2xx": int(non2xx.group(1)) if non2xx else 0,
            "errors": errors.group(0) if errors else ""}

rows = [("nginx return 204, 1 worker", parse("nginx1")),
        ("nginx return 204, 2 workers", parse("nginx2")),
        (f"sluiced POST /v1/check ({mode}), 2 threads", parse("sluiced"))]
width = max(len(name) for name, _ in rows)
print(f"{'server':<{width}}  {'requests/s':>11}  {'p50 ms':>8}  {'p99 ms':>8}  {'non-2xx':>8}")
for name, r in rows:
    print(f"{name:<{width}}  {r['rps']:>11.0f}  {r['p50']:>8.3f}  {r['p99']:>8.3f}  {r['non2xx']:>8}"
          + (f"  {r['errors']}" if r["errors"] else ""))
s = rows[2][1]
for name, r in rows[:2]:
    print(f"sluiced / {name}: requests/s x{s['rps'] / r['rps']:.2f}, p99 x{s['p99'] / r['p99']:.2f}")
if s["non2xx"]:
    print(f"warning: sluiced answered {s['non2xx']} of {s['total']} requests with non-2xx")
EOF
