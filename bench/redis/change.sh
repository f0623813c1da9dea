#!/usr/bin/env bash
# Issue 34's benchmark on Redis: decisions per second of a limit whose figures changed (each
# request names the earlier figures, and each key was carried from them) against the same
# limit unchanged, on one redis-server of its own, in one sitting, alternated so that a noisy
# machine weighs on both alike; then the first decisions after a change, each carrying its key.
#
#   bench/redis/change.sh [--duration 5] [--inflight 64]
#
# Rows: unchanged (a gcra limit of 2,000,000/s, every call admitted); changed (the same limit,
# named as changed from 1,000,000/s: keys already carried, so each call checks the key and its
# mark); carrying (100,000 keys under the earlier figures, then the changed limit's first
# decision on each: the script converts and marks).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
duration=5
inflight=64
while [[ $# -gt 0 ]]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --inflight) inflight=$2; shift 2 ;;
    *) echo "change.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
load="$root/build/bin/sluice_redis_load"
[[ -x "$load" ]] || { echo "change.sh: build first (make build)" >&2; exit 1; }
# shellcheck source=bench/redis/redis_server.sh
source "$root/bench/redis/redis_server.sh"
common=(--url "redis://127.0.0.1:$port" --connections 2 --batch 32 --inflight "$inflight")

rate() { "$load" "${common[@]}" "$@" | awk '{print $1}'; }

# Every key exists under both figures first: the changed rows find them carried.
rate --limit 1000000 --duration 2 >/dev/null
rate --limit 2000000 --changed-from 1000000 --duration 2 >/dev/null
for round in 1 2; do
  unchanged=$(rate --limit 2000000 --duration "$duration")
  changed=$(rate --limit 2000000 --changed-from 1000000 --duration "$duration")
  echo "round $round: unchanged $unchanged decisions/s, changed $changed decisions/s" \
       "($(python3 -c "print(f'{$changed / $unchanged:.2f}')")x)"
done
# Carrying: 100,000 fresh keys under the earlier figures, then each key's first decision
# under the new ones (a run of exactly one decision per key).
redis-cli -p "$port" flushall >/dev/null
rate --limit 1000000 --duration "$duration" --keys 100000 >/dev/null
carrying=$("$load" "${common[@]}" --limit 3000000 --changed-from 1000000 --keys 100000 \
             --duration 1 | awk '{print $1}')
echo "carrying (the first decisions after a change, most of them converting a key): $carrying decisions/s"
