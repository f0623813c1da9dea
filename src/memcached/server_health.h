#pragma once

// The Memcached servers' health as the store's calls find it (no call is made to find out):
// a server is lost when an operation on it fails for the server's reason (refused, lost, timed
// out; refusing when it answers that it cannot store: out of memory under -M), and back when
// an operation on it is answered. The lines and counts are the shared HealthLog's
// (src/core/health_log.h): said once per change, never per call.
//
// Thread-safe: the store's threads report to it at once. While no server is lost and no line
// is held back, Watching() is false and a call reports nothing (no lock, no clock read).

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string_view>

#include "sluice/store_log.h"
#include "src/core/health_log.h"

namespace sluice::internal {

class ServerHealth {
 public:
  using Time = HealthLog::Time;

  explicit ServerHealth(StoreLogSink sink) : log_("Memcached", std::move(sink)) {}

  // Whether an answered operation must be reported (a server is lost, or a line is due).
  bool Watching() const { return watching_.load(std::memory_order_relaxed); }

  void Lost(std::string_view server, std::string_view reason, bool refusing, Time now);
  void Answered(std::string_view server, Time now);   // An operation on it was answered.
  void Connected(std::string_view server, Time now);  // A probe answered: back, unless refusing.
  void Flush(Time now);                               // Says the lines whose time has come.

  HealthLog::Counts counts() const { return log_.counts(); }

 private:
  void Update(Time now);  // Says what is due; Watching() after a change. Holds mu_.

  std::mutex mu_;
  HealthLog log_;  // Guarded by mu_ (but counts()).
  std::atomic<bool> watching_{false};
};

}  // namespace sluice::internal
