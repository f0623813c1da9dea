#!/usr/bin/env bash
# End-to-end tests of `sluice simulate`: a small trace through every algorithm compared with
# the golden outputs in golden/ (made by this binary, checked against the independent model
# in tests/model/ and by hand), and every error case: exit status 2, a message naming the
# line or flag, and no rows printed after a bad one.
# Usage: golden_test.sh SLUICE_BINARY CLI_TEST_DIR [--update]
set -uo pipefail
sluice=$1
dir=$2
update=${3:-}
passed=0
failed=0
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

ok() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }

golden() {  # name, flags..., optionally --trace-file FILE last (default: trace.csv)
  local name=$1
  shift
  local trace="$dir/trace.csv"
  if [[ $# -ge 2 && "${*: -2:1}" == "--trace-file" ]]; then
    trace="${*: -1}"
    set -- "${@:1:$#-2}"
  fi
  local out="$scratch/$name.csv"
  if ! "$sluice" simulate "$@" "$trace" >"$out" 2>"$scratch/err"; then
    fail "$name: exit status $? ($(cat "$scratch/err"))"
    return
  fi
  if [[ "$update" == "--update" ]]; then
    cp "$out" "$dir/golden/$name.csv"
  fi
  if diff -u "$dir/golden/$name.csv" "$out" >"$scratch/diff"; then ok; else
    fail "$name differs from golden/$name.csv:"
    cat "$scratch/diff"
  fi
}

golden fixed_window --algorithm fixed_window --limit 3 --period 1s
golden sliding_log --algorithm sliding_log --limit 3 --period 1s
golden sliding_window --algorithm sliding_window --limit 3 --period 1s
golden sliding_buckets --algorithm sliding_buckets --limit 3 --period 1s --buckets 4
golden token_bucket --algorithm token_bucket --limit 3 --period 1s --burst 4
golden gcra --algorithm gcra --limit 3 --period 1s --burst 4
golden leaky_bucket --algorithm leaky_bucket --limit 3 --period 1s --burst 4
golden compare --compare fixed_window,gcra --limit 3 --period 1s
# A calendar quota, two a day in Berlin, over 2024-03-31, a day of 23 hours (worked by hand:
# reset_after 82,800 s at its first instant, 86,400 s at April 1's).
golden calendar_day_berlin --algorithm fixed_window --limit 2 --period 1d --calendar \
  --time-zone Europe/Berlin --trace-file "$dir/calendar_trace.csv"

# expect_error NAME EXPECTED_STDOUT_LINES MESSAGE_SUBSTRING -- ARGS... ; stdin from $input
expect_error() {
  local name=$1 lines=$2 message=$3
  shift 4
  "$sluice" "$@" <"$input" >"$scratch/out" 2>"$scratch/err"
  local status=$?
  local got_lines
  got_lines=$(wc -l <"$scratch/out")
  if [[ $status -ne 2 ]]; then
    fail "$name: exit status $status, want 2"
  elif ! grep -qF -- "$message" "$scratch/err"; then
    fail "$name: stderr '$(cat "$scratch/err")' does not say '$message'"
  elif [[ $got_lines -ne $lines ]]; then
    fail "$name: printed $got_lines lines, want $lines"
  else
    ok
  fi
}

flags=(simulate --algorithm gcra --limit 3 --period 1s)
input=$scratch/back.csv
printf 'time_us,key,cost\n10,a,1\n20,a,1\n15,a,1\n30,a,1\n' >"$input"
expect_error back_in_time 3 "stdin: line 4: time_us 15 goes back in time" -- "${flags[@]}"
input=$scratch/malformed.csv
printf 'time_us,key,cost\n10,a,1\n2O,a,1\n' >"$input"
expect_error malformed_time 2 "line 3: time_us '2O' is not an integer" -- "${flags[@]}"
input=$scratch/negative.csv
printf 'time_us,key,cost\n10,a,-1\n20,a,1\n' >"$input"
expect_error negative_cost 1 "line 2: cost -1 is negative" -- "${flags[@]}"
input=$scratch/fields.csv
printf 'time_us,key,cost\n10,a\n' >"$input"
expect_error missing_field 1 "line 2: expected 3 fields, found 2" -- "${flags[@]}"
input=$scratch/header.csv
printf 'when,key\n10,a\n' >"$input"
expect_error bad_header 0 "line 1: unknown column 'when'" -- "${flags[@]}"

input=$dir/trace.csv
expect_error unknown_algorithm 0 "--algorithm: unknown algorithm 'gcr'" -- \
  simulate --algorithm gcr --limit 3 --period 1s
expect_error unknown_in_compare 0 "--compare: unknown algorithm 'nope'" -- \
  simulate --compare gcra,nope --limit 3 --period 1s
expect_error bad_period 0 "--period: invalid duration '1sec'" -- \
  simulate --algorithm gcra --limit 3 --period 1sec
expect_error missing_limit 0 "--limit is required" -- simulate --algorithm gcra --period 1s
expect_error non_numeric_limit 0 "--limit" -- simulate --algorithm gcra --limit ten --period 1s
expect_error zero_limit 0 "limit must be between 1 and" -- \
  simulate --algorithm gcra --limit 0 --period 1s
expect_error negative_burst 0 "burst must be between 1 and" -- \
  simulate --algorithm gcra --limit 3 --burst -2 --period 1s
expect_error buckets 0 "buckets 7 does not divide the period 1s" -- \
  simulate --algorithm sliding_buckets --limit 3 --period 1s --buckets 7
expect_error both_modes 0 "give exactly one of --algorithm NAME and --compare" -- \
  simulate --algorithm gcra --compare gcra,fixed_window --limit 3 --period 1s
expect_error missing_file 0 "cannot open trace '/nonexistent.csv'" -- \
  simulate --algorithm gcra --limit 3 --period 1s /nonexistent.csv
expect_error unknown_flag 0 "--colour" -- simulate --algorithm gcra --limit 3 --period 1s --colour
expect_error calendar_period 0 "a calendar quota's period is 1d, 1w, 1mo or 1y" -- \
  simulate --algorithm fixed_window --limit 3 --period 30d --calendar
expect_error calendar_gcra 0 "a calendar quota is a fixed_window, not a gcra" -- \
  simulate --algorithm gcra --limit 3 --period 1mo --calendar
expect_error calendar_zone 0 "unknown time zone 'Mars/Olympus'" -- \
  simulate --algorithm fixed_window --limit 3 --period 1d --calendar --time-zone Mars/Olympus

# --svg writes a picture with one lane per algorithm.
if "$sluice" simulate --compare fixed_window,gcra,leaky_bucket --limit 3 --period 1s \
  --svg "$scratch/p.svg" "$dir/trace.csv" >/dev/null 2>&1 &&
  [[ $(grep -c 'class="title"' "$scratch/p.svg") -eq 3 ]] && grep -q '</svg>' "$scratch/p.svg"; then
  ok
else
  fail "svg: expected three lanes in $scratch/p.svg"
fi

echo "cli: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
