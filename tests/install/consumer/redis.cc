// A user's program on the Redis store's component: parses a URL and creates the store (which
// connects in the background: no Redis is needed), which links the whole engine, hiredis and
// OpenSSL included.

#include <cstdio>

#include "sluice/redis_store.h"

int main() {
  absl::StatusOr<sluice::RedisStoreOptions> options =
      sluice::ParseRedisUrl("redis://127.0.0.1:1/0");
  if (!options.ok() || options->endpoints.size() != 1 || options->endpoints[0].port != 1) {
    std::fprintf(stderr, "consumer_redis: ParseRedisUrl gave the wrong options\n");
    return 1;
  }
  options->timeout = std::chrono::milliseconds(10);
  sluice::RedisEndpoint unused{.host = "localhost"};
  (void)unused;
  absl::StatusOr<std::unique_ptr<sluice::RedisStore>> store = sluice::RedisStore::Create(*options);
  if (!store.ok()) {
    std::fprintf(stderr, "consumer_redis: %s\n", store.status().ToString().c_str());
    return 1;
  }
  std::printf("consumer_redis: ok\n");
  return 0;
}
