# Sourced by the Redis benchmarks: starts a redis-server of their own on a free loopback port
# (in $port, its files in $work), stopped and removed when the script exits.
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-redis.XXXXXX")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
  --logfile "$work/redis.log" --daemonize yes --pidfile "$work/redis.pid"
cleanup() {
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
