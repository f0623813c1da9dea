// Snapshots of the memory store: a restart that loads one decides exactly as if there had been
// no restart; keys that reset meanwhile are dropped; a bad file is reported and loads nothing.

#include "src/memory/snapshot.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "sluice/memory_store.h"
#include "tests/testing/random.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using testing::Random;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

// A file path in a fresh directory, removed with the test.
class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/sluice-snapshot-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/store.snap";
  }
  void TearDown() override {
    std::remove(path_.c_str());
    rmdir(dir_.c_str());  // Fails, and the test says so, if a temporary file was left behind.
    EXPECT_NE(access(dir_.c_str(), F_OK), 0) << "something was left in " << dir_;
  }

  std::string Read() const {
    std::ifstream in(path_, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  void Write(const std::string& bytes) const {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes;
  }

  std::string dir_;
  std::string path_;
};

class SnapshotRoundTripTest : public SnapshotTest,
                              public ::testing::WithParamInterface<Algorithm> {};

TEST_P(SnapshotRoundTripTest, DecisionsAfterARestartEqualThoseWithoutOne) {
  Random random(testing::Seed(300 + static_cast<uint64_t>(GetParam())));
  for (int c = 0; c < 20; ++c) {
    MemoryStore running;  // Never restarts.
    const Limit limit = random.LimitFor(running, GetParam());
    const Limit other = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 3, .period = 1h});
    int64_t t = kEpoch;
    auto key = [&] { return fmt::format("key-{}", random.Between(0, 9)); };
    for (int row = 0; row < 100 && At(t) < MemoryStore::kLatest - 24h; ++row) {
      t += random.Gap(limit);
      const int64_t cost = random.Cost(limit);
      const std::string k = key();
      ASSERT_TRUE(running.Decide(limit, k, cost, At(t)).ok());
      ASSERT_TRUE(running.Decide(other, k, 1, At(t)).ok());
    }
    ASSERT_TRUE(running.SaveSnapshot(path_).ok());
    t += random.Gap(limit);  // Down for a while.
    MemoryStore restarted;
    const absl::StatusOr<size_t> loaded = restarted.LoadSnapshot(path_, At(t));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_LE(*loaded, running.KeyCount());
    for (int row = 0; row < 100 && At(t) < MemoryStore::kLatest; ++row) {
      const int64_t cost = random.Cost(limit);
      const std::string k = key();
      ASSERT_EQ(*restarted.Decide(limit, k, cost, At(t)), *running.Decide(limit, k, cost, At(t)))
          << limit.ToString() << " case " << c << " row " << row;
      ASSERT_EQ(*restarted.Decide(other, k, 1, At(t)), *running.Decide(other, k, 1, At(t)));
      t += random.Gap(limit);
    }
  }
}

// A calendar quota's table keeps its calendar: after a restart it decides in the zone's
// windows, not in windows of its longest period from the epoch.
TEST_F(SnapshotTest, ACalendarQuotaComesBackWithItsCalendar) {
  const Limit month =
      MustLimit({.limit = 3, .calendar = Calendar{CalendarUnit::kMonth, "Europe/Berlin"}});
  const Limit fixed = MustLimit({.limit = 3, .period = month.period()});
  constexpr int64_t kBerlinApril = 1711922400LL * 1'000'000;  // 2024-04-01 00:00 in Berlin.
  MemoryStore running;
  for (const char* key : {"a", "b"}) {
    ASSERT_TRUE(running.Decide(month, key, 2, At(kBerlinApril - 60'000'000)).ok());
    ASSERT_TRUE(running.Decide(fixed, key, 1, At(kBerlinApril - 60'000'000)).ok());
  }
  ASSERT_TRUE(running.SaveSnapshot(path_).ok());
  MemoryStore restarted;
  const absl::StatusOr<size_t> loaded = restarted.LoadSnapshot(path_, At(kBerlinApril - 1));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, 4U);
  for (const int64_t t : {kBerlinApril - 1, kBerlinApril}) {
    for (const char* key : {"a", "b"}) {
      EXPECT_EQ(*restarted.Decide(month, key, 0, At(t)), *running.Decide(month, key, 0, At(t)));
      EXPECT_EQ(*restarted.Decide(fixed, key, 0, At(t)), *running.Decide(fixed, key, 0, At(t)));
    }
  }
  EXPECT_EQ(restarted.Decide(month, "a", 0, At(kBerlinApril - 1))->remaining, 1);
  EXPECT_EQ(restarted.Decide(month, "a", 0, At(kBerlinApril))->remaining, 3);  // April.
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, SnapshotRoundTripTest,
                         ::testing::ValuesIn(testing::AllAlgorithms()), testing::AlgorithmTestName);

TEST_F(SnapshotTest, KeysThatResetMeanwhileAreDropped) {
  const Limit limit = MustLimit({.algorithm = Algorithm::kGcra, .limit = 1, .period = 1s});
  MemoryStore store;
  ASSERT_TRUE(store.Decide(limit, "early", 1, At(kEpoch))->allowed);
  ASSERT_TRUE(store.Decide(limit, "late", 1, At(kEpoch + 900'000))->allowed);
  ASSERT_TRUE(store.SaveSnapshot(path_).ok());

  MemoryStore restarted;
  // At 1.5 s "early" (reset at 1 s) carries nothing; "late" (resets at 1.9 s) still does.
  EXPECT_EQ(*restarted.LoadSnapshot(path_, At(kEpoch + 1'500'000)), 1u);
  EXPECT_EQ(restarted.KeyCount(), 1u);
  EXPECT_FALSE(restarted.Decide(limit, "late", 1, At(kEpoch + 1'500'000))->allowed);
}

TEST_F(SnapshotTest, SavingReplacesTheFileAtomically) {
  const Limit limit = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 5, .period = 1h});
  MemoryStore store;
  ASSERT_TRUE(store.Decide(limit, "a", 1, At(kEpoch))->allowed);
  ASSERT_TRUE(store.SaveSnapshot(path_).ok());
  ASSERT_TRUE(store.Decide(limit, "b", 1, At(kEpoch))->allowed);
  ASSERT_TRUE(store.SaveSnapshot(path_).ok());
  MemoryStore restarted;
  EXPECT_EQ(*restarted.LoadSnapshot(path_, At(kEpoch)), 2u);
  EXPECT_EQ(restarted.SaveSnapshot(dir_ + "/no/such/dir/x.snap").code(),
            absl::StatusCode::kUnavailable);
}

// A store with a little state in it, saved to path_; returns the file's bytes.
std::string SaveSome(const std::string& path) {
  MemoryStore store;
  for (Algorithm a : testing::AllAlgorithms()) {
    const Limit limit = MustLimit({.algorithm = a, .limit = 10, .period = 1h, .buckets = 60});
    for (int k = 0; k < 5; ++k) {
      EXPECT_TRUE(store.Decide(limit, fmt::format("k{}", k), 1, At(kEpoch + k)).ok());
    }
  }
  EXPECT_TRUE(store.SaveSnapshot(path).ok());
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_F(SnapshotTest, EveryFlippedByteIsCaughtAndNothingLoads) {
  const std::string good = SaveSome(path_);
  ASSERT_GT(good.size(), 100u);
  for (size_t i = 0; i < good.size(); i += 7) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x20);
    Write(bad);
    MemoryStore store;
    const absl::StatusOr<size_t> loaded = store.LoadSnapshot(path_, At(kEpoch));
    ASSERT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss) << "byte " << i;
    EXPECT_EQ(store.KeyCount(), 0u);
  }
}

TEST_F(SnapshotTest, TruncatedEmptyForeignAndMissingFilesAreReported) {
  const std::string good = SaveSome(path_);
  for (size_t keep : {size_t{0}, size_t{5}, size_t{21}, good.size() / 2, good.size() - 1}) {
    Write(good.substr(0, keep));
    MemoryStore store;
    const absl::Status s = store.LoadSnapshot(path_, At(kEpoch)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << keep;
    EXPECT_NE(s.message().find(path_), absl::string_view::npos) << s;
    EXPECT_EQ(store.KeyCount(), 0u);
  }
  Write("");
  MemoryStore store;
  EXPECT_EQ(store.LoadSnapshot(path_, At(kEpoch)).status().message(),
            fmt::format("snapshot {} is unusable: the file is empty", path_));
  Write("time_us,key,cost\n1,a,1\n2,a,1\n");
  EXPECT_EQ(store.LoadSnapshot(path_, At(kEpoch)).status().message(),
            fmt::format("snapshot {} is unusable: not a sluice snapshot", path_));
  EXPECT_EQ(store.LoadSnapshot(dir_ + "/missing", At(kEpoch)).status().code(),
            absl::StatusCode::kNotFound);
}

// A file with a correct frame and checksum whose contents are wrong: checked before anything
// is stored, so the good table in front of the bad one does not load either.
// The parts of a crafted body: a table of `limit` per second, a gcra key, and a good gcra
// table that loads alone (5 per second is 1 per 200,000 µs in lowest terms, so its TAT counts
// microseconds). The good table once had a TAT of 5 x kEpoch, past the store's range, and every
// case of WellFramedButWrongContentsLoadNothing was refused there rather than for its own part.
void Table(internal::SnapshotWriter& w, uint8_t algorithm, int64_t limit) {
  w.U8(1);
  w.U8(algorithm);
  w.I64(limit);
  w.I64(1'000'000);
  w.I64(limit);
  w.I64(1);
}
void GcraKey(internal::SnapshotWriter& w, std::string_view key, Int128 tat) {
  w.U8(1);
  w.U32(static_cast<uint32_t>(key.size()));
  w.Bytes(key);
  w.I128(tat);
}
void GoodTable(internal::SnapshotWriter& w) {
  Table(w, 5, 5);
  GcraKey(w, "good", Int128{kEpoch} + 1'000'000);
  w.U8(0);
}

TEST_F(SnapshotTest, TheGoodTableOfTheCraftedFilesLoadsAlone) {
  internal::SnapshotWriter w;
  GoodTable(w);
  w.U8(0);
  ASSERT_TRUE(internal::WriteSnapshotFile(path_, w.data()).ok());
  MemoryStore store;
  EXPECT_EQ(store.LoadSnapshot(path_, At(kEpoch)).value_or(0), 1u);
}

TEST_F(SnapshotTest, WellFramedButWrongContentsLoadNothing) {
  struct Case {
    std::string name;
    std::function<void(internal::SnapshotWriter&)> bad_part;
  };
  const std::vector<Case> cases = {
      {"unknown algorithm", [&](auto& w) { Table(w, 42, 5); }},
      {"invalid limit", [&](auto& w) { Table(w, 5, -5); }},
      {"negative count",
       [&](auto& w) {
         Table(w, 0, 5);
         w.U8(1);
         w.U32(1);
         w.Bytes("k");
         w.I64(kEpoch);
         w.I64(-3);
       }},
      {"key longer than the file",
       [&](auto& w) {
         Table(w, 5, 5);
         w.U8(1);
         w.U32(1'000'000);
       }},
      {"log out of order",
       [&](auto& w) {
         Table(w, 1, 5);
         w.U8(1);
         w.U32(1);
         w.Bytes("k");
         w.I64(kEpoch);
         w.U32(2);
         w.I64(kEpoch);
         w.I64(1);
         w.I64(kEpoch - 1);
         w.I64(1);
       }},
      // Found by fuzz/snapshot_fuzz.cc: counts each within int64 but not their sum overflowed
      // the queue's total as they were read, before Plausible could refuse them (UBSan:
      // signed overflow in CountQueue::Add).
      {"log whose counts sum past int64",
       [&](auto& w) {
         Table(w, 1, 5);
         w.U8(1);
         w.U32(1);
         w.Bytes("k");
         w.I64(kEpoch);
         w.U32(2);
         w.I64(kEpoch - 1);
         w.I64(std::numeric_limits<int64_t>::max() - 1);
         w.I64(kEpoch);
         w.I64(std::numeric_limits<int64_t>::max() - 1);
       }},
  };
  for (const Case& c : cases) {
    internal::SnapshotWriter w;
    GoodTable(w);
    c.bad_part(w);
    ASSERT_TRUE(internal::WriteSnapshotFile(path_, w.data()).ok());
    MemoryStore store;
    const absl::Status s = store.LoadSnapshot(path_, At(kEpoch)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << c.name << ": " << s;
    EXPECT_EQ(store.KeyCount(), 0u) << c.name;
  }
}

}  // namespace
}  // namespace sluice
