# The front door: `make run` and `make test` are all a newcomer needs (see README.md).
# Every target first installs what is missing (scripts/install-deps) and builds.

ALGORITHMS := fixed_window,sliding_window,sliding_log,sliding_buckets,token_bucket,gcra,leaky_bucket
JOBS ?= $(shell nproc)

.PHONY: all deps build install package run simulate workers partner test test-release test-asan test-tsan soak fuzz bench bench-peers bench-http bench-grpc bench-redis bench-memcached format tidy clean

all: build

deps:
	@scripts/install-deps

build: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

# The library (headers, static libraries, the CMake package sluice::sluice, sluice.pc) and the
# two programs, under PREFIX: docs/library.md.
PREFIX ?= /usr/local
install: build
	cmake --install build --prefix $(PREFIX)

# The Debian package of the programs, the library and the sluiced service:
# build/package/sluice_VERSION_amd64.deb (docs/package.md).
package: build
	@cpack --config build/CPackConfig.cmake -B build/package
	@ls build/package/*.deb

# Starts sluiced on the memory store with examples/sluice.yaml (Ctrl-C stops it) and prints
# the curl loop of examples/try.sh to try it with.
HTTP ?= 127.0.0.1:8080
run: build
	@mkdir -p out && [ -s out/admin.token ] || \
	  (umask 077 && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' > out/admin.token)
	@echo
	@echo "sluiced is starting on http://$(HTTP) with examples/sluice.yaml. In another terminal,"
	@echo "examples/try.sh runs this (five 200s, then a 429, for a new user on each run):"
	@echo
	@sed -n '/^user=/,/^done/p' examples/try.sh
	@echo
	@echo "The operator's page: http://$(HTTP)/ui/ (any user name; the password is the admin"
	@echo "token, in out/admin.token). More in docs/server.md. Ctrl-C stops the server."
	@echo
	@exec build/bin/sluiced --config examples/sluice.yaml --http $(HTTP) --ui \
	  --admin-token-file out/admin.token

# examples/workers: 4 workers share 5 per second and 100 per day through sluiced on Redis,
# each pacing itself with `sluice acquire` (about 20 s); draws out/workers.svg.
workers: build
	@python3 examples/workers/run.py --svg out/workers.svg

# examples/partner: 4 workers call a partner whose real limit is lower than the rules say and
# drops halfway, once without telling sluiced what it answers and once with it (POST
# /v1/feedback); prints its 429s and the calls it accepted, and draws both runs into
# out/partner.svg (about a minute).
partner: build
	@python3 examples/partner/run.py --svg out/partner.svg

# Replays examples/burst.csv (10 per second, with a burst across a window edge) through every
# algorithm and draws the comparison.
simulate: build
	@mkdir -p out
	build/bin/sluice simulate --compare $(ALGORITHMS) --limit 10 --period 1s --buckets 10 \
	  --svg out/burst.svg examples/burst.csv > out/burst.csv
	@echo "Decisions: out/burst.csv    Picture: out/burst.svg (open it in a browser)"

# Every test: the release build with the lint (label lint: clang-format, scripts/sizes, and every
# program a preset's tests run built by that preset), then the unit tests under ASan+UBSan (with
# a short run of each fuzz target, fuzz/), then the concurrent tests under TSan. scripts/test-all
# compiles each preset while the one before it is tested; test-release, test-asan and test-tsan
# run one preset alone.
test: deps
	@JOBS=$(JOBS) scripts/test-all

test-release: build
	@ctest --preset release -j $(JOBS)

test-asan: deps
	@cmake --preset asan >/dev/null
	@cmake --build --preset asan -j $(JOBS)
	@ctest --preset asan -j $(JOBS)

test-tsan: deps
	@cmake --preset tsan >/dev/null
	@cmake --build --preset tsan -j $(JOBS)
	@ctest --preset tsan -j $(JOBS)

# The soak, not in `make test`: sluiced on Redis (one per failure policy) under mixed load for
# SOAK_MINUTES while Redis is killed, frozen and demoted, the rules reload and a key flood goes
# on; prints RSS over time, answers by phase and admissions against each key's allowance, and
# fails on over-admission, memory growth or a broken failure policy (bench/soak/soak.py).
SOAK_MINUTES ?= 10
soak: build
	@python3 bench/soak/checks_test.py
	@python3 bench/soak/soak.py --sluiced build/bin/sluiced --minutes $(SOAK_MINUTES)

# The fuzz targets (fuzz/, docs/development.md) for FUZZ_SECONDS each, growing their corpus in
# FUZZ_DIR, outside the repository: `make fuzz FUZZ_SECONDS=600 FUZZ_TARGETS="rules json"`.
FUZZ_TARGETS ?= http json rules trace snapshot resp receipt
FUZZ_SECONDS ?= 60
fuzz: deps
	@cmake --preset asan >/dev/null
	@cmake --build --preset asan -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	@FUZZ_SECONDS=$(FUZZ_SECONDS) $(if $(FUZZ_DIR),FUZZ_DIR=$(FUZZ_DIR)) fuzz/run.sh $(FUZZ_TARGETS)

bench: build
	build/bin/sluice_bench --benchmark_counters_tabular=true
	build/bin/sluice_memory_bench

# Issue 23's table, sluice beside Guava, x/time/rate, rate-limiter-flexible, envoyproxy/ratelimit
# and nginx, in rounds in one sitting (bench/peers/README.md): `make bench-peers PEERS_FLAGS=--quick`.
bench-peers: build
	@scripts/install-deps --bench
	bench/peers/table.py $(PEERS_FLAGS)

# sluiced over HTTP: wrk against POST /v1/check beside nginx's `return 204` in the same run.
bench-http: build
	bench/http/run.sh

# sluiced's Envoy API over gRPC: 64 ShouldRateLimit calls in flight (bench/grpc/grpc_load.cc).
bench-redis: build
	bench/redis/run.sh

bench-grpc: build
	bench/grpc/run.sh

# RedisStore beside MemcachedStore: decisions/s and p99, counter and gcra, cold keys and a hot key.
bench-memcached: build
	bench/memcached/run.sh

# clang-format over the C++ files git tracks; `make test` checks the same files (lint_format).
format:
	scripts/format

tidy: build
	clang-tidy -p build $$(git ls-files 'src/*.cc' 'server/*.cc' 'tools/*.cc')

clean:
	rm -rf build build-asan build-tsan out
