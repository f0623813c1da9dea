#!/usr/bin/env bash
# Installs the pinned npm packages of each folder given (its package-lock.json) with `npm ci`,
# unless its node_modules already holds exactly that lock's install: the Node tests need
# express, and `make test` runs from a clean clone. Quick when already installed; one run at a
# time per folder (flock), as two build trees may test side by side.
set -euo pipefail

for dir in "$@"; do
  dir=$(cd "$dir" && pwd)
  lock="${TMPDIR:-/tmp}/sluice-npm-ci.$(printf '%s' "$dir" | md5sum | cut -c1-16).lock"
  (
    flock 9
    stamp="$dir/node_modules/.sluice-installed-lock"
    if [[ -f "$stamp" ]] && cmp -s "$stamp" "$dir/package-lock.json"; then
      echo "npm_ci: $dir: installed already"
      exit 0
    fi
    echo "npm_ci: $dir: npm ci"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$dir/package-lock.json" "$stamp"
  ) 9>"$lock"
done
