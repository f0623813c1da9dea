// The state the previous release left behind decides the same in this one (issue 34: keys and
// a snapshot written by the release before the change of limit and the calendar quotas, commit
// a4e0c30, made by write_fixture.cc against it). Each store of this release is given what
// that release's store held after trace A (the memory store's snapshot file; Redis's keys;
// Memcached's items) and asked trace B: every answer is the one that release gave. Then the
// same state carried through a change of limit: every store answers alike.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

#include "sluice/memcached_store.h"
#include "sluice/memory_store.h"
#include "sluice/redis_store.h"
#include "src/memcached/connection.h"
#include "src/memcached/server_health.h"
#include "tests/memcached/fixtures.h"
#include "tests/redis/fixtures.h"
#include "tests/testing/memcached_server.h"
#include "tests/testing/redis_server.h"
#include "tests/upgrade/upgrade_trace.h"

namespace sluice {
namespace {

using upgrade::Step;

const std::string kFixture = SLUICE_UPGRADE_FIXTURE_DIR;

std::vector<std::string> Lines(const std::string& name) {
  std::ifstream in(kFixture + "/" + name);
  EXPECT_TRUE(in.good()) << "cannot read " << kFixture << "/" << name;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  return lines;
}

std::string Unhex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  }
  return out;
}

// Trace B's answers from `store` (each limit with `before` as its earlier figures, when set),
// one line each, as the fixture writes them.
std::vector<std::string> AnswersOf(Store& store, const std::vector<Limit>& limits,
                                   const std::vector<Limit>& before = {}) {
  std::vector<std::string> out;
  for (const Step& s : upgrade::TraceB()) {
    const LimitedKey request{
        .limit = &limits[s.limit],
        .key = s.key,
        .before = before.empty() ? std::span<const Limit>() : std::span(&before[s.limit], 1)};
    Decision each[1];
    const absl::StatusOr<Decision> d =
        store.DecideAll({&request, 1}, s.cost, Timestamp(Micros(s.time)), each);
    EXPECT_TRUE(d.ok()) << d.status();
    out.push_back(d.ok() ? upgrade::FormatAnswer(s, *d) : std::string(d.status().message()));
  }
  return out;
}

// The fixture's limits with 4 in place of 5 per second: a change of limit on the old state.
std::vector<Limit> Lowered() {
  std::vector<Limit> out;
  for (const Limit& l : upgrade::Limits()) {
    out.push_back(*Limit::Create({.algorithm = l.algorithm(),
                                  .limit = 4,
                                  .period = l.period(),
                                  .burst = l.burst() - 1,
                                  .buckets = l.buckets()}));
  }
  return out;
}

std::unique_ptr<MemoryStore> MemoryFromSnapshot() {
  auto memory = std::make_unique<MemoryStore>();
  const absl::StatusOr<size_t> loaded =
      memory->LoadSnapshot(kFixture + "/memory.snapshot", Timestamp(Micros(upgrade::kStart)));
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded.value_or(0), 21u);  // 7 limits on 3 keys.
  return memory;
}

// Redis's keys as the fixture holds them, on `server`.
void LoadRedisKeys(const testing::RedisServer& server) {
  testing::Client client(server.port());
  const std::vector<std::string> lines = Lines("redis_keys.txt");
  ASSERT_EQ(lines.size(), 21u);
  for (const std::string& line : lines) {
    const std::vector<std::string> parts = absl::StrSplit(line, '\t');
    ASSERT_GE(parts.size(), 3u) << line;
    const std::string key = Unhex(parts[1]);
    if (parts[0] == "string") {
      ASSERT_NE(client.Run({"SET", key, Unhex(parts[2]), "PX", "600000"}), nullptr);
    } else {
      std::vector<std::string> push = {"RPUSH", key};
      for (size_t i = 2; i < parts.size(); ++i) {
        push.push_back(Unhex(parts[i]));
      }
      ASSERT_NE(client.Run(push), nullptr);
      ASSERT_NE(client.Run({"PEXPIRE", key, "600000"}), nullptr);
    }
  }
}

// Memcached's items as the fixture holds them, on `server`.
void LoadMemcachedItems(const testing::MemcachedServer& server) {
  internal::ServerHealth health({});
  auto connection =
      internal::MemcachedConnection::MakePrototype(testing::MemcachedOptionsFor({&server}), health);
  ASSERT_TRUE(connection.ok()) << connection.status();
  const std::vector<std::string> lines = Lines("memcached_items.txt");
  ASSERT_EQ(lines.size(), 21u);
  for (const std::string& line : lines) {
    const std::vector<std::string> parts = absl::StrSplit(line, '\t');
    ASSERT_EQ(parts.size(), 2u) << line;
    const absl::StatusOr<bool> added = (*connection)->Add(Unhex(parts[0]), Unhex(parts[1]), 600);
    ASSERT_TRUE(added.ok() && *added) << line;
  }
}

TEST(UpgradeTest, ASnapshotOfThePreviousReleaseDecidesAsItDid) {
  std::unique_ptr<MemoryStore> memory = MemoryFromSnapshot();
  EXPECT_EQ(AnswersOf(*memory, upgrade::Limits()), Lines("memory_answers.txt"));
}

TEST(UpgradeTest, RedisKeysOfThePreviousReleaseDecideAsTheyDid) {
  testing::RedisServer server;
  LoadRedisKeys(server);
  std::unique_ptr<RedisStore> redis = testing::MustStore(testing::OptionsFor(server));
  EXPECT_EQ(AnswersOf(*redis, upgrade::Limits()), Lines("redis_answers.txt"));
}

TEST(UpgradeTest, MemcachedItemsOfThePreviousReleaseDecideAsTheyDid) {
  testing::MemcachedServer server;
  LoadMemcachedItems(server);
  std::unique_ptr<MemcachedStore> memcached =
      testing::MustMemcached(testing::MemcachedOptionsFor({&server}));
  EXPECT_EQ(AnswersOf(*memcached, upgrade::Limits()), Lines("memcached_answers.txt"));
}

// The previous release's state, carried through a change of every limit (5 to 4 per second):
// the three stores answer alike, and not as keys that started afresh.
TEST(UpgradeTest, ThePreviousReleasesStateCarriesThroughAChangeOfLimitOnEveryStore) {
  const std::vector<Limit> lowered = Lowered();
  const std::vector<Limit> before = upgrade::Limits();
  std::unique_ptr<MemoryStore> memory = MemoryFromSnapshot();
  const std::vector<std::string> want = AnswersOf(*memory, lowered, before);
  MemoryStore fresh;
  EXPECT_NE(want, AnswersOf(fresh, lowered));  // What was used counts.
  testing::RedisServer redis_server;
  LoadRedisKeys(redis_server);
  std::unique_ptr<RedisStore> redis = testing::MustStore(testing::OptionsFor(redis_server));
  EXPECT_EQ(AnswersOf(*redis, lowered, before), want);
  testing::MemcachedServer memcached_server;
  LoadMemcachedItems(memcached_server);
  std::unique_ptr<MemcachedStore> memcached =
      testing::MustMemcached(testing::MemcachedOptionsFor({&memcached_server}));
  EXPECT_EQ(AnswersOf(*memcached, lowered, before), want);
}

}  // namespace
}  // namespace sluice
