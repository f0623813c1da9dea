// StatsdSink against a UDP socket of the test's own on loopback: the lines it sends, counters
// as their growth between flushes, datagrams never over the size, the thread's flushes and
// the last one at Stop. Also under ThreadSanitizer: the sink's thread reads what the test's
// thread changes.

#include "server/stats/statsd.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A UDP socket bound to a loopback port: a free one, or `port`.
class Receiver {
 public:
  explicit Receiver(uint16_t port = 0) {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    socklen_t size = sizeof(address);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&address), size), 0) << "port " << port;
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size), 0);
    port_ = ntohs(address.sin_port);
  }
  ~Receiver() { close(fd_); }

  uint16_t port() const { return port_; }

  // The next datagram, or "" when none comes within `wait` (a watchdog, not a measure).
  std::string Next(std::chrono::milliseconds wait = std::chrono::seconds(10)) {
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, static_cast<int>(wait.count())) != 1) {
      return "";
    }
    std::string datagram(65536, '\0');
    const ssize_t n = recv(fd_, datagram.data(), datagram.size(), 0);
    datagram.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return datagram;
  }

  // Every datagram already here (loopback delivers before send returns).
  std::vector<std::string> All() {
    std::vector<std::string> all;
    for (std::string d = Next(std::chrono::milliseconds(0)); !d.empty();
         d = Next(std::chrono::milliseconds(0))) {
      all.push_back(std::move(d));
    }
    return all;
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// Statistics the test changes while the sink reads them.
class Stats {
 public:
  void Set(const std::string& name, uint64_t value, Stat::Kind kind = Stat::Kind::kCounter) {
    std::lock_guard lock(mutex_);
    stats_[name] = {.name = name, .value = value, .kind = kind};
  }
  StatsdSink::Source Source() {
    return [this] {
      std::lock_guard lock(mutex_);
      std::vector<Stat> out;
      for (const auto& [name, stat] : stats_) {
        out.push_back(stat);
      }
      return out;
    };
  }

 private:
  std::mutex mutex_;
  std::map<std::string, Stat> stats_;
};

constexpr auto kNever = std::chrono::hours(24);  // An interval that never ends in a test.

std::unique_ptr<StatsdSink> MustStart(const Receiver& receiver, Stats& stats,
                                      Micros interval = kNever, size_t max = 1432) {
  absl::StatusOr<std::unique_ptr<StatsdSink>> sink = StatsdSink::Start(
      {.host = "127.0.0.1", .port = receiver.port(), .interval = interval, .max_datagram = max},
      stats.Source());
  EXPECT_TRUE(sink.ok()) << sink.status();
  return sink.ok() ? *std::move(sink) : nullptr;
}

TEST(StatsdSinkTest, CountersAreSentAsTheirGrowthAndGaugesAsTheyStand) {
  Receiver receiver;
  Stats stats;
  stats.Set("ratelimit.a.total_hits", 5);
  stats.Set("ratelimit.b.total_hits", 0);
  stats.Set("ratelimit.cx_active", 2, Stat::Kind::kGauge);
  std::unique_ptr<StatsdSink> sink = MustStart(receiver, stats);
  ASSERT_NE(sink, nullptr);
  EXPECT_EQ(sink->destination(), "127.0.0.1:" + std::to_string(receiver.port()));

  EXPECT_EQ(sink->Flush(), 1U);
  EXPECT_THAT(receiver.All(), ElementsAre("ratelimit.a.total_hits:5|c\nratelimit.cx_active:2|g\n"));
  stats.Set("ratelimit.a.total_hits", 12);
  stats.Set("ratelimit.b.total_hits", 3);
  EXPECT_EQ(sink->Flush(), 1U);
  EXPECT_THAT(receiver.All(), ElementsAre("ratelimit.a.total_hits:7|c\n"
                                          "ratelimit.b.total_hits:3|c\n"
                                          "ratelimit.cx_active:2|g\n"));
  EXPECT_EQ(sink->Flush(), 1U);  // Nothing grew: the gauge alone.
  EXPECT_THAT(receiver.All(), ElementsAre("ratelimit.cx_active:2|g\n"));
}

// A timer's samples go as their growth, each one line standing for that many calls (statsd's
// sample rate): a flush's lines are as many as the buckets, whatever the calls.
TEST(StatsdSinkTest, TimersAreSentAsSampledLinesOfTheirGrowth) {
  Receiver receiver;
  std::vector<std::pair<double, uint64_t>> samples = {{0.025, 4}, {5.0, 1}, {1000.0, 0}};
  std::mutex mutex;
  absl::StatusOr<std::unique_ptr<StatsdSink>> sink =
      StatsdSink::Start({.host = "127.0.0.1", .port = receiver.port(), .interval = kNever}, [&] {
        std::lock_guard lock(mutex);
        return std::vector<Stat>{
            {.name = "t.response_time", .kind = Stat::Kind::kTimer, .samples = samples}};
      });
  ASSERT_TRUE(sink.ok()) << sink.status();
  EXPECT_EQ((*sink)->Flush(), 1U);
  EXPECT_THAT(receiver.All(),
              ElementsAre("t.response_time:0.025|ms|@0.25\nt.response_time:5|ms\n"));
  {
    std::lock_guard lock(mutex);
    samples = {{0.025, 4}, {5.0, 3}, {1000.0, 0}};
  }
  EXPECT_EQ((*sink)->Flush(), 1U);
  EXPECT_THAT(receiver.All(), ElementsAre("t.response_time:5|ms|@0.5\n"));
  EXPECT_EQ((*sink)->Flush(), 0U);  // Nothing grew: nothing sent.
}

TEST(StatsdSinkTest, NothingToSendSendsNothing) {
  Receiver receiver;
  Stats stats;
  stats.Set("ratelimit.a.total_hits", 0);
  std::unique_ptr<StatsdSink> sink = MustStart(receiver, stats);
  ASSERT_NE(sink, nullptr);
  EXPECT_EQ(sink->Flush(), 0U);
  EXPECT_THAT(receiver.All(), IsEmpty());
}

TEST(StatsdSinkTest, DatagramsHoldWholeLinesAndNeverPassTheSize) {
  Receiver receiver;
  Stats stats;
  std::map<std::string, uint64_t> sent;
  for (int i = 0; i < 300; ++i) {
    const std::string name =
        "ratelimit.service.rate_limit.domain.key_value" + std::to_string(i) + ".total_hits";
    stats.Set(name, 1'000'000 + static_cast<uint64_t>(i));
    sent[name] = 1'000'000 + static_cast<uint64_t>(i);
  }
  // A line over the size is never sent; the others are.
  stats.Set("ratelimit." + std::string(1500, 'x'), 1);
  std::unique_ptr<StatsdSink> sink = MustStart(receiver, stats);
  ASSERT_NE(sink, nullptr);
  const size_t count = sink->Flush();
  const std::vector<std::string> datagrams = receiver.All();
  EXPECT_EQ(datagrams.size(), count);
  EXPECT_GT(datagrams.size(), 1U);
  std::map<std::string, uint64_t> received;
  for (const std::string& datagram : datagrams) {
    EXPECT_LE(datagram.size(), StatsdOptions::kMaxDatagram);
    ASSERT_TRUE(datagram.ends_with('\n')) << datagram;
    std::istringstream lines(datagram);
    for (std::string line; std::getline(lines, line);) {
      const size_t colon = line.find(':');
      ASSERT_NE(colon, std::string::npos) << line;
      ASSERT_TRUE(line.ends_with("|c")) << line;
      const std::string name = line.substr(0, colon);
      EXPECT_FALSE(received.contains(name)) << name << " twice";
      received[name] = std::stoull(line.substr(colon + 1));
    }
  }
  EXPECT_EQ(received, sent);
}

TEST(StatsdSinkTest, ASmallerSizeIsKept) {
  Receiver receiver;
  Stats stats;
  for (int i = 0; i < 20; ++i) {
    stats.Set("ratelimit.k" + std::to_string(i) + ".total_hits", 7);  // 28 or 29 bytes a line.
  }
  std::unique_ptr<StatsdSink> sink = MustStart(receiver, stats, kNever, 100);
  ASSERT_NE(sink, nullptr);
  sink->Flush();
  const std::vector<std::string> datagrams = receiver.All();
  ASSERT_FALSE(datagrams.empty());
  size_t lines = 0;
  for (size_t i = 0; i < datagrams.size(); ++i) {
    EXPECT_LE(datagrams[i].size(), 100U);
    if (i + 1 < datagrams.size()) {
      EXPECT_GT(datagrams[i].size(), 100U - 29U) << "it had room for another line";
    }
    lines += static_cast<size_t>(std::count(datagrams[i].begin(), datagrams[i].end(), '\n'));
  }
  EXPECT_EQ(lines, 20U);
}

TEST(StatsdSinkTest, TheThreadFlushesEveryIntervalAndStopSendsTheRest) {
  Receiver receiver;
  Stats stats;
  stats.Set("ratelimit.a.total_hits", 1);
  std::unique_ptr<StatsdSink> sink = MustStart(receiver, stats, std::chrono::milliseconds(20));
  ASSERT_NE(sink, nullptr);
  EXPECT_EQ(receiver.Next(), "ratelimit.a.total_hits:1|c\n");  // Sent by the thread.
  stats.Set("ratelimit.a.total_hits", 4);
  EXPECT_EQ(receiver.Next(), "ratelimit.a.total_hits:3|c\n");
  stats.Set("ratelimit.a.total_hits", 10);
  sink->Stop();
  // The last flush sent the 6 since the thread's last one, whenever that was.
  uint64_t total = 0;
  for (const std::string& datagram : receiver.All()) {
    total += std::stoull(datagram.substr(datagram.find(':') + 1));
  }
  EXPECT_EQ(total, 6U);
  sink->Stop();  // Again: nothing more.
  EXPECT_THAT(receiver.All(), IsEmpty());
}

// With no statsd listening, each datagram is refused on loopback (ICMP port unreachable), and
// the socket reports that at the next send: the sink sends that one again rather than lose it
// too, and every flush ends with a refusal pending. Once a statsd listens on the port, the next
// flush meets the last refusal and still arrives. (A sink that did not send again would lose
// every other flush; an odd number of lost flushes leaves it one with a refusal pending.)
// Counts lost meanwhile stay lost: a counter is sent as its growth since the last flush.
TEST(StatsdSinkTest, NoStatsdListeningLosesDatagramsButNotTheSink) {
  uint16_t port = 0;
  {
    Receiver gone;
    port = gone.port();
  }
  Stats stats;
  stats.Set("ratelimit.a.total_hits", 1);
  absl::StatusOr<std::unique_ptr<StatsdSink>> sink =
      StatsdSink::Start({.host = "127.0.0.1", .port = port, .interval = kNever}, stats.Source());
  ASSERT_TRUE(sink.ok()) << sink.status();
  for (int i = 2; i < 5; ++i) {
    stats.Set("ratelimit.a.total_hits", static_cast<uint64_t>(i));
    (*sink)->Flush();  // Refused on loopback (ICMP): sent again, lost; never an error.
  }

  // The port was free a moment ago; only another process's bind, by chance, could take it.
  Receiver statsd(port);
  stats.Set("ratelimit.a.total_hits", 9);
  EXPECT_EQ((*sink)->Flush(), 1U);
  EXPECT_EQ(statsd.Next(), "ratelimit.a.total_hits:5|c\n");
  EXPECT_THAT(statsd.All(), IsEmpty());
}

TEST(StatsdSinkTest, BadOptionsAreRefusedNamingThem) {
  Stats stats;
  auto start = [&](StatsdOptions options) {
    return StatsdSink::Start(std::move(options), stats.Source()).status();
  };
  EXPECT_THAT(start({.host = "127.0.0.1", .port = 0}).message(), HasSubstr("port"));
  EXPECT_THAT(start({.host = "127.0.0.1", .port = 8125, .interval = Micros{0}}).message(),
              HasSubstr("interval"));
  EXPECT_THAT(start({.host = "127.0.0.1", .port = 8125, .max_datagram = 10}).message(),
              HasSubstr("64 bytes"));
}

}  // namespace
}  // namespace sluice::server
