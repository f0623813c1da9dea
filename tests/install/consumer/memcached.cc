// A user's program on the Memcached store's component: options from a URL, a store created
// (it connects on first use: no memcached is needed) and one decision on a port where none
// listens, which the allow policy admits: it links the whole store, libmemcached included.

#include <chrono>
#include <cstdio>

#include "sluice/clock.h"
#include "sluice/memcached_store.h"

using namespace std::chrono_literals;

int main() {
  absl::StatusOr<sluice::MemcachedStoreOptions> options =
      sluice::ParseMemcachedUrl("memcached://127.0.0.1:1");
  if (!options.ok() || options->servers.size() != 1 || options->servers[0].port != 1) {
    std::fprintf(stderr, "consumer_memcached: ParseMemcachedUrl gave the wrong options\n");
    return 1;
  }
  options->timeout = 50ms;
  options->on_failure = sluice::FailurePolicy::kAllow;
  absl::StatusOr<std::unique_ptr<sluice::MemcachedStore>> store =
      sluice::MemcachedStore::Create(*options);
  if (!store.ok()) {
    std::fprintf(stderr, "consumer_memcached: %s\n", store.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<sluice::Limit> limit = sluice::Limit::Create({.limit = 5, .period = 1s});
  if (!limit.ok()) {
    std::fprintf(stderr, "consumer_memcached: %s\n", limit.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<sluice::Decision> d =
      (*store)->Decide(*limit, "alice", 1, sluice::SystemClock().Now());
  if (!d.ok() || !d->allowed || (*store)->Stats().fallbacks != 1) {
    std::fprintf(stderr, "consumer_memcached: the allow policy did not decide\n");
    return 1;
  }
  std::printf("consumer_memcached: ok\n");
  return 0;
}
