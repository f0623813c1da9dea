#!/usr/bin/env bash
# Runs the fuzz targets (built by the asan preset in build-asan/bin) for FUZZ_SECONDS each, one
# after another, as `make fuzz` does. Each target starts from its seed corpus in the repository
# (fuzz/corpus/<target>/, only read) and the corpus it grew before, in FUZZ_DIR/<target>/
# (outside the repository: new inputs are written there); a crash is written to
# FUZZ_DIR/<target>-crash-..., and the run stops with the target's report.
#
#   fuzz/run.sh [TARGET...]     (default: every target)
#   FUZZ_SECONDS=600 FUZZ_DIR=~/fuzz FUZZ_JOBS=2 fuzz/run.sh rules json
#
# FUZZ_JOBS runs that many fuzzing processes per target (libFuzzer's -fork), for a machine with
# cores to spare. Extra libFuzzer flags can follow `--`.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${FUZZ_BIN:-$root/build-asan/bin}
seconds=${FUZZ_SECONDS:-60}
dir=${FUZZ_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-fuzz}
jobs=${FUZZ_JOBS:-1}

targets=()
extra=()
while [[ $# -gt 0 ]]; do
  if [[ $1 == -- ]]; then
    shift
    extra=("$@")
    break
  fi
  targets+=("$1")
  shift
done
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=(http json rules trace snapshot resp receipt)
fi

for t in "${targets[@]}"; do
  exe=$bin/fuzz_$t
  [[ -x $exe ]] || { echo "fuzz/run.sh: no $exe (make fuzz builds it)" >&2; exit 2; }
  mkdir -p "$dir/$t"
  flags=(-max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1
         -artifact_prefix="$dir/$t-")
  [[ -f $root/fuzz/$t.dict ]] && flags+=(-dict="$root/fuzz/$t.dict")
  [[ $jobs -gt 1 ]] && flags+=(-fork="$jobs")
  echo "== fuzz_$t for ${seconds}s: corpus $dir/$t"
  "$exe" "${flags[@]}" "${extra[@]}" "$dir/$t" "$root/fuzz/corpus/$t"
done
