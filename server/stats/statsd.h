#pragma once

// StatsdSink: sends statistics to a statsd server over UDP, every interval, from a thread of
// its own, as envoyproxy/ratelimit's stats library (lyft/gostats) does: a counter as its growth
// since the last flush ("name:N|c", only when it grew), a gauge as it stands ("name:N|g").
// Lines end with '\n' and go several to a datagram, none over max_datagram bytes (1432 by
// default, gostats' size for a 1500-byte MTU); a line longer than that is never sent (a
// warning names it once).
//
// Sending never waits: the socket is non-blocking, and a datagram the kernel does not take
// (or a statsd server that is not there) is lost, as UDP's are. Requests never wait for the
// sink either: it reads the counters they increment.
//
// Thread-safe: Flush may be called from any thread, beside the sink's own.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"

#include "server/stats/envoy_stats.h"
#include "sluice/clock.h"
#include "src/core/mutex.h"

namespace sluice::server {

struct StatsdOptions {
  static constexpr size_t kMaxDatagram = 1432;
  std::string host;  // A name or an address; resolved once, at Start.
  uint16_t port = 0;
  Micros interval = std::chrono::seconds(10);  // envoyproxy/ratelimit's STATS_FLUSH_INTERVAL.
  size_t max_datagram = kMaxDatagram;
};

class StatsdSink {
 public:
  // The statistics to send, read at each flush: counters as running totals.
  using Source = std::function<std::vector<Stat>()>;

  // A sink sending `source`'s statistics to options.host:port every options.interval.
  // InvalidArgument when the host does not resolve, the port is 0, the interval is not
  // positive or max_datagram is under 64 bytes; Internal when no socket can be opened.
  static absl::StatusOr<std::unique_ptr<StatsdSink>> Start(StatsdOptions options, Source source);

  // Stop().
  ~StatsdSink();
  StatsdSink(const StatsdSink&) = delete;
  StatsdSink& operator=(const StatsdSink&) = delete;

  // Sends what changed since the last flush now. Returns the datagrams sent.
  size_t Flush();

  // Stops the thread after a last flush (what was counted until now is sent). Idempotent.
  void Stop();

  // Where the statistics go, as resolved ("127.0.0.1:8125").
  const std::string& destination() const { return destination_; }

 private:
  StatsdSink(StatsdOptions options, Source source, int fd, std::string destination);
  void Run();
  // A timer's lines (Stat::Kind::kTimer): one per sample that grew. Updates last_.
  void AddTimerLines(const Stat& stat, std::vector<std::string>& lines)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mutex_);
  // The lines to send: counters that grew, every gauge, timers. Updates last_.
  std::vector<std::string> Lines() ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mutex_);
  bool Send(const std::string& datagram) ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mutex_);

  const StatsdOptions options_;
  const Source source_;
  const int fd_;  // A UDP socket connected to the destination.
  const std::string destination_;

  internal::Mutex flush_mutex_;  // One flush at a time.
  std::unordered_map<std::string, uint64_t> last_ ABSL_GUARDED_BY(flush_mutex_);
  // Datagrams the kernel did not take, and when that was last logged (once a minute at most).
  static constexpr std::chrono::seconds kWarningEvery{60};
  uint64_t failures_ ABSL_GUARDED_BY(flush_mutex_) = 0;
  std::chrono::steady_clock::time_point last_warning_ ABSL_GUARDED_BY(flush_mutex_);
  bool warned_long_ ABSL_GUARDED_BY(flush_mutex_) = false;  // A line too long was logged.

  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // Guarded by stop_mutex_.
  std::thread thread_;
};

}  // namespace sluice::server
