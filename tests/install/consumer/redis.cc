// A user's program on the Redis store's component: options in the designated-initializer style
// and from a URL, and a store created (it connects in the background: no Redis is needed),
// which links the whole engine, hiredis and OpenSSL included.

#include <chrono>
#include <cstdio>

#include "sluice/redis_store.h"

using namespace std::chrono_literals;

int main() {
  absl::StatusOr<sluice::RedisStoreOptions> parsed = sluice::ParseRedisUrl("redis://127.0.0.1:1/0");
  if (!parsed.ok() || parsed->endpoints.size() != 1 || parsed->endpoints[0].port != 1) {
    std::fprintf(stderr, "consumer_redis: ParseRedisUrl gave the wrong options\n");
    return 1;
  }
  sluice::RedisStoreOptions options{
      .endpoints = {{.host = "127.0.0.1", .port = 1}}, .timeout = 10ms, .key_prefix = "app:"};
  absl::StatusOr<std::unique_ptr<sluice::RedisStore>> store = sluice::RedisStore::Create(options);
  if (!store.ok()) {
    std::fprintf(stderr, "consumer_redis: %s\n", store.status().ToString().c_str());
    return 1;
  }
  std::printf("consumer_redis: ok\n");
  return 0;
}
