#pragma once

// What a RedisStore said through its log sink (RedisStoreOptions::log), kept for a test to
// read: the sink is called on the store's I/O thread, the lines read on the test's.

#include <chrono>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "sluice/redis_store.h"

namespace sluice::testing {

// The lines a store said, kept for the test to read.
class Lines {
 public:
  RedisLogSink Sink() {
    return [this](RedisLogLevel level, std::string_view line) {
      std::lock_guard lock(mu_);
      lines_.push_back(std::string(level == RedisLogLevel::kWarning ? "W " : "I ") +
                       std::string(line));
    };
  }
  std::vector<std::string> Get() const {
    std::lock_guard lock(mu_);
    return lines_;
  }
  // How many lines hold `text`, once at least one does or 5 s have passed: the store says a
  // line on its own thread, after the call that showed the change has been answered.
  int Await(std::string_view text) const {
    for (int i = 0; i < 500 && Count(text) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return Count(text);
  }
  // How many lines hold `text`.
  int Count(std::string_view text) const {
    int n = 0;
    for (const std::string& line : Get()) {
      n += line.find(text) != std::string::npos ? 1 : 0;
    }
    return n;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

inline std::string Joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) {
    out += line + "\n";
  }
  return out;
}

}  // namespace sluice::testing
