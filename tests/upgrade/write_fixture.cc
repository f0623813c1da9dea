// write_fixture: the state a release of sluice leaves behind, for tests/upgrade/ (issue 34:
// "keys and a snapshot written by the previous release decide the same after"). Not built by
// this tree: it was built against the release before the change of limit and the calendar
// quotas (commit a4e0c30), as a target of that tree's bench/CMakeLists.txt, and run once:
//
//   write_fixture OUT_DIR REDIS_PORT MEMCACHED_PORT
//
// On each store of that release (a MemoryStore, a RedisStore and a MemcachedStore on the
// servers given) it decides trace A (upgrade_trace.h), then writes what the store holds (the
// memory store's snapshot; every Redis key, its type and value; every Memcached item of the
// trace's limits and keys, hex-encoded), then decides trace B and writes its answers. The
// tests load that state into this release's stores and ask trace B again.

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>

#include "sluice/memcached_store.h"
#include "sluice/memory_store.h"
#include "sluice/redis_store.h"
#include "src/memcached/connection.h"
#include "src/memcached/keys.h"
#include "src/memcached/server_health.h"
#include "tests/upgrade/upgrade_trace.h"

namespace {

using sluice::Decision;
using sluice::Store;
using sluice::upgrade::Step;

void Decide(Store& store, const std::vector<sluice::Limit>& limits, const std::vector<Step>& trace,
            std::ofstream* answers) {
  for (const Step& s : trace) {
    const sluice::LimitedKey request{.limit = &limits[s.limit], .key = s.key};
    Decision each[1];
    const absl::StatusOr<Decision> d =
        store.DecideAll({&request, 1}, s.cost, sluice::Timestamp(sluice::Micros(s.time)), each);
    if (!d.ok()) {
      std::fprintf(stderr, "%s\n", std::string(d.status().message()).c_str());
      std::exit(1);
    }
    if (answers != nullptr) {
      *answers << sluice::upgrade::FormatAnswer(s, *d) << '\n';
    }
  }
}

std::string Hex(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    char two[3];
    std::snprintf(two, sizeof two, "%02x", c);
    out += two;
  }
  return out;
}

void DumpRedis(int port, std::ofstream& out) {
  redisContext* c = redisConnect("127.0.0.1", port);
  auto* keys = static_cast<redisReply*>(redisCommand(c, "KEYS sluice:*"));
  for (size_t i = 0; i < keys->elements; ++i) {
    const std::string key(keys->element[i]->str, keys->element[i]->len);
    auto* type = static_cast<redisReply*>(redisCommand(c, "TYPE %b", key.data(), key.size()));
    if (std::string(type->str) == "string") {
      auto* v = static_cast<redisReply*>(redisCommand(c, "GET %b", key.data(), key.size()));
      out << "string\t" << Hex(key) << '\t' << Hex(std::string_view(v->str, v->len)) << '\n';
      freeReplyObject(v);
    } else {
      auto* v = static_cast<redisReply*>(redisCommand(c, "LRANGE %b 0 -1", key.data(), key.size()));
      out << "list\t" << Hex(key);
      for (size_t j = 0; j < v->elements; ++j) {
        out << '\t' << Hex(std::string_view(v->element[j]->str, v->element[j]->len));
      }
      out << '\n';
      freeReplyObject(v);
    }
    freeReplyObject(type);
  }
  freeReplyObject(keys);
  redisFree(c);
}

void DumpMemcached(const sluice::MemcachedStoreOptions& options,
                   const std::vector<sluice::Limit>& limits, std::ofstream& out) {
  sluice::internal::ServerHealth health({});
  auto connection = sluice::internal::MemcachedConnection::MakePrototype(options, health);
  for (const sluice::Limit& limit : limits) {
    for (const char* key : sluice::upgrade::kKeys) {
      const std::string item = sluice::internal::ItemKey(options.key_prefix, limit, key);
      auto got = (*connection)->Gets(item);
      if (got.ok() && got->has_value()) {
        out << Hex(item) << '\t' << Hex((*got)->value) << '\n';
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: write_fixture OUT_DIR REDIS_PORT MEMCACHED_PORT\n");
    return 2;
  }
  const std::string dir = argv[1];
  const std::vector<sluice::Limit> limits = sluice::upgrade::Limits();
  {
    sluice::MemoryStore memory;
    Decide(memory, limits, sluice::upgrade::TraceA(), nullptr);
    if (!memory.SaveSnapshot(dir + "/memory.snapshot").ok()) {
      return 1;
    }
    std::ofstream answers(dir + "/memory_answers.txt");
    Decide(memory, limits, sluice::upgrade::TraceB(), &answers);
  }
  {
    auto options = *sluice::ParseRedisUrl("redis://127.0.0.1:" + std::string(argv[2]));
    options.use_caller_time = true;
    options.expiry_margin = std::chrono::minutes(10);
    auto redis = *sluice::RedisStore::Create(options);
    Decide(*redis, limits, sluice::upgrade::TraceA(), nullptr);
    std::ofstream keys(dir + "/redis_keys.txt");
    DumpRedis(std::stoi(argv[2]), keys);
    std::ofstream answers(dir + "/redis_answers.txt");
    Decide(*redis, limits, sluice::upgrade::TraceB(), &answers);
  }
  {
    auto options = *sluice::ParseMemcachedUrl("memcached://127.0.0.1:" + std::string(argv[3]));
    auto memcached = *sluice::MemcachedStore::Create(options);
    Decide(*memcached, limits, sluice::upgrade::TraceA(), nullptr);
    std::ofstream items(dir + "/memcached_items.txt");
    DumpMemcached(options, limits, items);
    std::ofstream answers(dir + "/memcached_answers.txt");
    Decide(*memcached, limits, sluice::upgrade::TraceB(), &answers);
  }
  return 0;
}
