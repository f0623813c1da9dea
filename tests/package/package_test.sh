#!/usr/bin/env bash
# The Debian package (docs/package.md): built by CPack from BUILD_DIR, checked by lintian (only
# the warnings docs/package.md explains may remain), unpacked into a fresh directory (nothing
# is installed on the machine), its files, conffiles and maintainer scripts checked, its unit
# checked by systemd-analyze, and sluiced started from the unit's own ExecStart line with the
# packaged options and rules, as an unprivileged user when this runs as root.
#
#   package_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd) source=$(cd "$2" && pwd)
work=$(mktemp -d)
pid=
cleanup() {
  [[ -n "$pid" ]] && kill "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "package_test: $*" >&2; exit 1; }

# 1. Built by CPack (as `make package` builds it), into a directory of this test's.
cpack --config "$build/CPackConfig.cmake" -B "$work/out" > "$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log"; fail "cpack failed"; }
deb=$(ls "$work"/out/sluice_*_amd64.deb 2>/dev/null | head -1)
[[ -f "$deb" ]] || fail "no .deb in $work/out"

# 2. lintian: no error, and no warning but those docs/package.md explains.
explained=(
  # The package is built from the repository, not from a Debian source package: its libraries'
  # pkg-config files are where the build's GNUInstallDirs put them for its prefix.
  pkg-config-unavailable-for-cross-compilation
)
lintian --no-tag-display-limit "$deb" > "$work/lintian.log" 2>&1 || true
unexplained=$(grep -E '^[EW]: ' "$work/lintian.log" |
  grep -vE "^W: sluice: ($(IFS='|'; echo "${explained[*]}"))( |$)" || true)
[[ -z "$unexplained" ]] || fail "lintian says:"$'\n'"$unexplained"
grep -qE '^E: ' "$work/lintian.log" && fail "lintian errors: $(cat "$work/lintian.log")"

# 3. Unpacked: the files, the conffiles, the maintainer scripts.
root="$work/root"
mkdir -p "$root" "$work/control"
chmod 0755 "$work" "$root"
dpkg-deb -x "$deb" "$root"
dpkg-deb -e "$deb" "$work/control"
for f in usr/bin/sluiced usr/bin/sluice lib/systemd/system/sluiced.service etc/sluice/sluice.yaml \
         etc/default/sluiced usr/share/man/man8/sluiced.8.gz usr/share/man/man1/sluice.1.gz \
         usr/share/doc/sluice/copyright usr/share/doc/sluice/changelog.gz \
         usr/include/sluice/limiter.h usr/lib/pkgconfig/sluice.pc usr/lib/cmake/sluice/sluiceConfig.cmake; do
  [[ -s "$root/$f" ]] || fail "$f missing from the package"
done
[[ -x "$root/usr/bin/sluiced" ]] || fail "sluiced not executable"
diff <(sort "$work/control/conffiles") <(printf '/etc/default/sluiced\n/etc/sluice/sluice.yaml\n') ||
  fail "conffiles differ"
for script in postinst prerm postrm; do
  [[ -x "$work/control/$script" ]] || fail "$script missing or not executable"
  sh -n "$work/control/$script" || fail "$script is not valid sh"
done
grep -q 'adduser --system' "$work/control/postinst" || fail "postinst makes no user"
[[ "$(dpkg-deb -f "$deb" Depends)" == *'libgrpc++'* ]] || fail "Depends lacks the libraries"
man_page=$(zcat "$root/usr/share/man/man8/sluiced.8.gz")
[[ "$man_page" == *'\-\-config'* ]] || fail "man sluiced lacks its options"

# 4. The unit: read by systemd without a complaint, and hardened (exposure at most 2.0 of 10).
unit="$root/lib/systemd/system/sluiced.service"
if command -v systemd-analyze > /dev/null; then
  systemd-analyze security --offline=true --threshold=20 "$unit" > "$work/security.log" 2>&1 ||
    fail "systemd-analyze security: $(tail -3 "$work/security.log")"
  if grep -E 'Unknown (key|section)|Failed to parse|Invalid|is not valid' "$work/security.log"; then
    fail "systemd cannot read the unit"
  fi
  settings=$(grep -E '^(User|ProtectSystem|NoNewPrivileges)=' "$unit" | sort | tr '\n' ' ')
  [[ "$settings" == 'NoNewPrivileges=yes ProtectSystem=strict User=sluice ' ]] ||
    fail "the unit's user or hardening: $settings"
else
  echo "package_test: systemd-analyze not installed: the unit's check skipped" >&2
fi

# 5. sluiced from the unit's ExecStart line: its paths under the unpacked root, $SLUICED_OPTS
# from the packaged /etc/default/sluiced, the ports made free ones.
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
[[ "$exec_start" == "/usr/bin/sluiced --config /etc/sluice/sluice.yaml \$SLUICED_OPTS" ]] ||
  fail "ExecStart changed: update this test ($exec_start)"
opts=$(set -a; . "$root/etc/default/sluiced"; echo "$SLUICED_OPTS")
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http=$(free_port) grpc=$(free_port)
opts=${opts/127.0.0.1:8080/127.0.0.1:$http}
opts=${opts/127.0.0.1:8081/127.0.0.1:$grpc}
line=${exec_start//\$SLUICED_OPTS/$opts}
line=${line//\/usr\/bin\//$root/usr/bin/}
line=${line//\/etc\//$root/etc/}
as=()
if [[ $(id -u) == 0 ]]; then
  as=(setpriv --reuid=nobody --regid=nogroup --clear-groups --)
fi
# shellcheck disable=SC2086 # the line is split into words as systemd splits it
(cd "$root" && exec "${as[@]}" $line) > "$work/sluiced.log" 2>&1 &
pid=$!
for _ in $(seq 200); do
  curl -sf "http://127.0.0.1:$http/healthz" > /dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || fail "sluiced stopped: $(cat "$work/sluiced.log")"
  sleep 0.05
done
curl -sf "http://127.0.0.1:$http/healthz" > /dev/null || fail "no /healthz: $(cat "$work/sluiced.log")"
answer=$(curl -s -X POST "http://127.0.0.1:$http/v1/check" \
  -d '{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "alice"}]}]}')
[[ "$answer" == *'"allowed":true'* ]] || fail "the packaged rules: $answer"
# systemctl reload: SIGHUP reloads the rules and sluiced keeps serving.
kill -HUP "$pid"
sleep 0.2
curl -sf "http://127.0.0.1:$http/healthz" > /dev/null || fail "not serving after SIGHUP"
kill -TERM "$pid"
wait "$pid" || fail "sluiced exited $? on SIGTERM: $(cat "$work/sluiced.log")"
pid=
echo "package_test: $(basename "$deb") built, lintian clean, its service started from its unit"
