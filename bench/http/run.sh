#!/usr/bin/env bash
# The HTTP benchmark: wrk on loopback against
#   1. nginx answering `return 204;` with worker_processes 1, then 2 (the baseline: what a
#      minimal HTTP/1.1 keep-alive server does on this machine),
#   2. sluiced with one event loop (--threads 1), then two, answering POST /v1/check,
# every server sent the same requests by bench/http/check.lua (POSTs with a JSON body, keys
# spread over 10,000 users, so sluiced admits every one; nginx reads and drops the body), so
# that wrk, which shares the cores, does the same work per request against each,
# in --rounds rounds, the four one after the other in each, and prints requests/s, p50 and
# p99 for each, then sluiced's ratios to nginx round by round and their median.
#
#   bench/http/run.sh [--sluiced PATH] [--nginx PATH] [--duration 10s] [--mode adhoc|rules]
#                     [--connections 64] [--threads 2] [--warmup 2s] [--rounds 3] [--redis]
#                     [--memcached] [--nice N] [--keep]
#
# --threads is wrk's. --nice N (-20..19) runs everything in a session of its own whose
# autogroup has nice N (needs root for N < 0): with the kernel's autogroups, every session
# gets an equal share of the cores, so on a machine others are building on, the servers and wrk
# get a few tenths of it, and p99 measures the others; --nice -15 shields the run (and slows
# the others while it lasts). The load average is printed at the start and the end either way. --redis, --memcached: sluiced on that store, a server of its own on a free
# port, emptied before each sluiced starts. check.lua's environment picks the keys
# (SLUICE_BENCH_USERS=1: one hot key) and, ad hoc, the algorithm (SLUICE_BENCH_ALGORITHM).
#
# Needs wrk (Debian: apt-get install -y wrk), nginx and python3 (free ports). Every server
# listens on 127.0.0.1 on a port free at start; all of them are stopped on exit. wrk and the
# servers share the machine's cores, so one run's p99 can be off by half from the next: a
# ratio is taken between servers measured side by side in one round, and the median over
# rounds is the figure to quote. Beyond p99, the summary gives p99.9 (check.lua's done()): on
# this machine (250 Hz, 2 cores, 4 busy threads) a woken thread can wait up to two scheduler
# ticks, 8 ms, for a core, and the tail piles up just under it (bench/http/README.md, "The
# two-loop tail").
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
memcached=0
memcached_port=
rounds=3
nice=
args=("$@")

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
    --memcached) memcached=1; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    --nice) nice=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [[ -n $nice && -z ${SLUICE_BENCH_NICED:-} ]]; then
  [[ $nice =~ ^-?[0-9]+$ && $nice -ge -20 && $nice -le 19 ]] ||
    { echo "run.sh: --nice takes -20..19, not '$nice'" >&2; exit 2; }
  [[ -w /proc/self/autogroup ]] ||
    { echo "run.sh: --nice: no /proc/self/autogroup (kernel without autogroups)" >&2; exit 1; }
  # A new session is a new autogroup: set its nice, then run this script again inside it. The
  # session is out of the terminal's reach, so an interrupt here is passed on to it (its
  # process group: run.sh there stops its servers on the way out).
  SLUICE_BENCH_NICED=1 setsid bash -c \
    'echo "$1" >/proc/self/autogroup || { echo "run.sh: --nice $1: cannot set the autogroup nice (root needed below 0)" >&2; exit 1; }; shift; exec "$@"' \
    run.sh "$nice" "$0" "${args[@]}" &
  session=$!
  trap 'kill -TERM -- "-$session" 2>/dev/null' INT TERM
  status=0
  wait "$session" || status=$?
  if kill -0 "$session" 2>/dev/null; then
    status=0
    wait "$session" || status=$?
  fi
  exit "$status"
fi

for tool in wrk "$nginx" python3; do
  if ! command -v "$tool" >/dev/null; then
    echo "run.sh: $tool not found" >&2
    [[ $tool == wrk ]] && echo "  Debian: apt-get install -y wrk" >&2
    exit 1
  fi
done
[[ -x "$sluiced" ]] || { echo "run.sh: no sluiced at $sluiced (build it first)" >&2; exit 1; }
case "$mode" in adhoc|rules) ;; *) echo "run.sh: --mode adhoc or rules" >&2; exit 2 ;; esac
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --rounds takes a count of 1 or more" >&2; exit 2; }

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
  if [[ -n $memcached_port ]]; then
    kill "$(cat "$work/memcached.pid")" 2>/dev/null || true
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

# bench NAME URL: check.lua's POSTs, a warm-up run (discarded), then the measured one into
# NAME.txt.
bench() {
  local name=$1 url=$2
  local args=(-t"$wrk_threads" -c"$connections" -s "$here/check.lua")
  if [[ $warmup != 0 && $warmup != 0s ]]; then
    SLUICE_BENCH_MODE=$mode wrk "${args[@]}" -d"$warmup" "$url" >/dev/null
  fi
  SLUICE_BENCH_MODE=$mode wrk "${args[@]}" -d"$duration" --latency "$url" >"$work/$name.txt"
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

store=(--store memory)
if [[ $redis == 1 ]]; then
  redis_port=$(free_port)
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
    --logfile "$work/redis.log" --daemonize yes
  for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.05; done
  store=(--store "redis://127.0.0.1:$redis_port")
fi
if [[ $memcached == 1 ]]; then
  memcached_port=$(free_port)
  memcached -l 127.0.0.1 -p "$memcached_port" -U 0 -m 256 -t 2 -d -P "$work/memcached.pid" \
    $([[ $(id -u) == 0 ]] && echo -u root)
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$memcached_port") 2>/dev/null && break; sleep 0.05; done
  store=(--store "memcached://127.0.0.1:$memcached_port")
fi
cat >"$work/rules.yaml" <<'EOF'
domain: bench
descriptors:
  - key: user
    rate_limit: {algorithm: gcra, requests_per_unit: 100000, unit: second}
EOF

start_sluiced() {  # LOOPS -> sets port
  # --http 127.0.0.1:0: the kernel's free port, read back from the log, so that nothing can
  # take it between choosing and binding.
  if [[ -n $redis_port ]]; then
    redis-cli -p "$redis_port" flushall >/dev/null  # Each run starts from an empty store.
  fi
  if [[ -n $memcached_port ]]; then
    exec 3<>"/dev/tcp/127.0.0.1/$memcached_port"
    printf 'flush_all\r\n' >&3
    read -r _ <&3
    exec 3>&-
  fi
  "$sluiced" --config "$work/rules.yaml" --http 127.0.0.1:0 --grpc 127.0.0.1:0 --threads "$1" --log-level info \
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

echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)${nice:+ (this run: autogroup nice $nice)}" >&2
echo "wrk -t$wrk_threads -c$connections -d$duration --latency (keep-alive, 127.0.0.1), $(nproc) cores," \
  "warm-up $warmup each, $rounds rounds, sluiced on ${store[*]} ($mode," \
  "${SLUICE_BENCH_ALGORITHM:-gcra}, ${SLUICE_BENCH_USERS:-10000} keys)" >&2

for round in $(seq "$rounds"); do
  for server in nginx1 nginx2 sluiced1 sluiced2; do  # The digit: workers, or event loops.
    case $server in
      nginx*) start_nginx "${server#nginx}" ;;
      sluiced*) start_sluiced "${server#sluiced}" ;;
    esac
    echo "round $round: $server: port $port" >&2
    bench "r$round-$server" "http://127.0.0.1:$port"
    stop_last
  done
done

echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# The summary, from wrk's outputs.
python3 - "$work" "$mode" "$rounds" <<'EOF'
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
    tail = re.search(r"^tail: p99\.5 ([0-9.]+) p99\.9 ([0-9.]+)", text, re.M)
    p999 = float(tail.group(2)) if tail else float("nan")
    total = int(re.search(r"(\d+) requests in", text).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    errors = re.search(r"Socket errors:.*", text)
    return {"rps": rps, "p50": p50, "p99": p99, "p999": p999, "total": total,
            "non2xx": int(non2xx.group(1)) if non2xx else 0,
            "errors": errors.group(0) if errors else ""}

SERVERS = {"nginx1": "nginx return 204, 1 worker",
           "nginx2": "nginx return 204, 2 workers",
           "sluiced1": f"sluiced POST /v1/check ({mode}), 1 loop",
           "sluiced2": f"sluiced POST /v1/check ({mode}), 2 loops"}
# Each sluiced against nginx with as many processes, and two loops against one worker too.
PAIRS = [("sluiced1", "nginx1", "1 loop / nginx 1 worker"),
         ("sluiced2", "nginx2", "2 loops / nginx 2 workers"),
         ("sluiced2", "nginx1", "2 loops / nginx 1 worker")]
rounds = int(sys.argv[3])
runs = [{key: parse(f"r{i}-{key}") for key in SERVERS} for i in range(1, rounds + 1)]

width = max(len(name) for name in SERVERS.values())
print(f"round  {'server':<{width}}  {'requests/s':>11}  {'p50 ms':>8}  {'p99 ms':>8}  {'p99.9 ms':>8}"
      f"  {'non-2xx':>8}")
for i, run in enumerate(runs, 1):
    for key, name in SERVERS.items():
        r = run[key]
        print(f"{i:>5}  {name:<{width}}  {r['rps']:>11.0f}  {r['p50']:>8.3f}  {r['p99']:>8.3f}"
              f"  {r['p999']:>8.3f}  {r['non2xx']:>8}" + (f"  {r['errors']}" if r["errors"] else ""))

def median(values):
    values = sorted(values)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2

def figures(ratios):
    return f"x{median(ratios):.2f} (rounds: " + " ".join(f"{x:.2f}" for x in ratios) + ")"

print()
for mine, theirs, label in PAIRS:
    print(f"sluiced {label}: requests/s "
          + figures([run[mine]["rps"] / run[theirs]["rps"] for run in runs])
          + ", p99 " + figures([run[mine]["p99"] / run[theirs]["p99"] for run in runs]))
for i, run in enumerate(runs, 1):
    for key in ("sluiced1", "sluiced2"):
        if run[key]["non2xx"]:
            print(f"warning: round {i}: {SERVERS[key]} answered {run[key]['non2xx']} of "
                  f"{run[key]['total']} requests with non-2xx")
EOF
