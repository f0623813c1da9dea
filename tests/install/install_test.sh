#!/usr/bin/env bash
# The library as a user gets it: installs the build tree into a temporary prefix, then builds
# tests/install/consumer against it both ways docs/library.md shows (find_package, pkg-config),
# with g++ and clang++ under -Wall -Wextra -Wpedantic -Werror, and runs it (each source with each
# compiler, each library each way). Then configures the library alone (SLUICE_LIBRARY_ONLY) as
# on a machine without the server's dependencies.
#
#   install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail

build=$1
source=$2
consumer=$source/tests/install/consumer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
warnings=(-Wall -Wextra -Wpedantic -Werror)

step() { echo "install_test: [${SECONDS}s] $*"; }
fail() { echo "install_test: FAILED: $*" >&2; exit 1; }

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
for f in include/sluice/limiter.h include/sluice/redis_store.h include/sluice/memcached_store.h \
         include/sluice/store_log.h lib/cmake/sluice/sluiceConfig.cmake \
         lib/cmake/sluice/sluiceConfigVersion.cmake lib/pkgconfig/sluice.pc lib/pkgconfig/sluice-redis.pc \
         lib/pkgconfig/sluice-memcached.pc; do
  [[ -f $prefix/$f ]] || fail "$f is not installed"
done

# Each compiler builds each source once and each way builds each library once: the Redis and
# Memcached consumers with find_package under g++ and with pkg-config under clang++ (a build is
# ~5 s).
# No -O: the consumer's speed does not matter, its build's does.
for cxx in g++ clang++; do
  redis=$([[ $cxx == g++ ]] && echo ON || echo OFF)
  step "find_package(sluice CONFIG$([[ $redis == ON ]] && echo ' COMPONENTS redis memcached')) with $cxx"
  dir=$tmp/cmake-$cxx
  cmake -S "$consumer" -B "$dir" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
        -DCMAKE_PREFIX_PATH="$prefix" -DCONSUMER_REDIS=$redis -DCONSUMER_MEMCACHED=$redis \
        >"$tmp/configure.log" 2>&1 ||
    { cat "$tmp/configure.log"; fail "configuring the consumer with $cxx"; }
  cmake --build "$dir" || fail "building the consumer (find_package) with $cxx"
  "$dir/consumer" || fail "the consumer (find_package, $cxx)"
  if [[ $redis == ON ]]; then
    "$dir/consumer_redis" || fail "the Redis consumer (find_package, $cxx)"
    "$dir/consumer_memcached" || fail "the Memcached consumer (find_package, $cxx)"
  fi

  export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
  step "pkg-config sluice with $cxx"
  # shellcheck disable=SC2046  # pkg-config's flags are words.
  "$cxx" -std=c++20 "${warnings[@]}" -o "$tmp/pc-$cxx" "$consumer/consumer.cc" \
    $(pkg-config --cflags --libs sluice) || fail "building the consumer (pkg-config sluice) with $cxx"
  "$tmp/pc-$cxx" || fail "the consumer (pkg-config, $cxx)"
  if [[ $redis == OFF ]]; then
    step "pkg-config sluice-redis with $cxx"
    # shellcheck disable=SC2046
    "$cxx" -std=c++20 "${warnings[@]}" -o "$tmp/pc-redis-$cxx" "$consumer/redis.cc" \
      $(pkg-config --cflags --libs sluice-redis) || fail "building the Redis consumer (pkg-config) with $cxx"
    "$tmp/pc-redis-$cxx" || fail "the Redis consumer (pkg-config, $cxx)"
    step "pkg-config sluice-memcached with $cxx"
    # shellcheck disable=SC2046
    "$cxx" -std=c++20 "${warnings[@]}" -o "$tmp/pc-memcached-$cxx" "$consumer/memcached.cc" \
      $(pkg-config --cflags --libs sluice-memcached) || fail "building the Memcached consumer (pkg-config) with $cxx"
    "$tmp/pc-memcached-$cxx" || fail "the Memcached consumer (pkg-config, $cxx)"
  fi
  unset PKG_CONFIG_PATH
done

# The library alone, as on a machine with none of the server's dependencies (each find_package of
# them would fail) and no hiredis (an empty pkg-config path) nor OpenSSL: it configures, without
# the Redis store, and has the library's targets only.
step "cmake -DSLUICE_LIBRARY_ONLY=ON, without the server's dependencies, hiredis or OpenSSL"
disabled=()
for p in gRPC Protobuf yaml-cpp CLI11 spdlog nlohmann_json simdjson GTest benchmark OpenSSL; do
  disabled+=("-DCMAKE_DISABLE_FIND_PACKAGE_$p=ON")
done
mkdir -p "$tmp/no-pc"
PKG_CONFIG_LIBDIR=$tmp/no-pc PKG_CONFIG_PATH= \
  cmake --no-warn-unused-cli -S "$source" -B "$tmp/library-only" -G Ninja -DSLUICE_LIBRARY_ONLY=ON \
  "${disabled[@]}" \
  >"$tmp/library-only.log" 2>&1 || { cat "$tmp/library-only.log"; fail "configuring with SLUICE_LIBRARY_ONLY=ON"; }
grep -q "the Redis store: OFF" "$tmp/library-only.log" || fail "SLUICE_LIBRARY_ONLY built the Redis store without hiredis"
targets=$(ninja -C "$tmp/library-only" -t targets all)
for t in libsluice_core.a libsluice_memory.a; do
  grep -q "^src/[a-z]*/$t:" <<<"$targets" || fail "SLUICE_LIBRARY_ONLY has no $t"
done
if grep -E '^bin/|sluice_redis|sluice_memcached|grpc' <<<"$targets" | head -3 | grep -q .; then
  fail "SLUICE_LIBRARY_ONLY builds more than the library: $(grep -E '^bin/|sluice_redis|sluice_memcached|grpc' <<<"$targets" | head -3)"
fi
step "ok"
