#pragma once

// What a shared store (RedisStore, MemcachedStore) tells an operator about the servers it uses:
// a server lost (with the reason: connection refused, AUTH refused naming Redis's error, a
// timeout, OOM or READONLY answered, memcached out of memory) and back, said once per change of
// state, never per call. A line of a kind said within kQuiet before (a server that comes and goes,
// a reconnection that fails for one reason then another) is held back and counted; once kQuiet has
// passed, the state the server is then in is said, with the count, unless it is the state said
// last. So the last line said of a server is its state, at most kQuiet late, and a server flapping
// says a few lines a minute.
//
// Not thread-safe: one thread at a time uses it (the Redis store's I/O thread; the Memcached
// store's threads under a mutex), but for counts(), which any thread may read (a health probe:
// what the store knows, without asking the servers). Time is passed in; the store calls Flush
// by a timer at due() (or as calls come).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "sluice/store_log.h"

namespace sluice::internal {

class HealthLog {
 public:
  using Time = std::chrono::steady_clock::time_point;
  static constexpr std::chrono::seconds kQuiet{30};

  // `sink` hears the lines, which name the servers as `what`'s ("Redis", "Memcached"); empty:
  // nothing is said (the state is still kept).
  HealthLog(std::string what, StoreLogSink sink) : what_(std::move(what)), sink_(std::move(sink)) {}

  // `server` cannot be used: lost (a connection failed: `refusing` false), or it answers that
  // it cannot decide (an error reply: `refusing` true).
  void Lost(std::string_view server, std::string_view reason, bool refusing, Time now);
  // A connection to `server` is ready: back, unless it was refusing to decide (a connection
  // does not show that it decides again).
  void Connected(std::string_view server, Time now);
  // `server` decided a call: back, whatever it was.
  void Answered(std::string_view server, Time now);
  // Sentinel: the master moved from `from` (forgotten: it is no longer used) to another
  // server; says `line`.
  void Moved(std::string_view from, std::string_view line);
  // Says what was held back and is still true, if its time has come.
  void Flush(Time now);
  // When Flush may have something to say; nullopt: nothing is held back.
  std::optional<Time> due() const;

  bool lost(std::string_view server) const;  // Whether `server` is lost now.
  // Whether `server` is lost now because it answered that it cannot decide.
  bool refusing(std::string_view server) const;

  // How many servers are lost now (at once, not as said: no kQuiet here), by kind: their
  // connections fail, or they answered that they cannot decide. Any thread.
  struct Counts {
    int lost = 0;
    int refusing = 0;
  };
  Counts counts() const {
    return {lost_.load(std::memory_order_relaxed), refusing_.load(std::memory_order_relaxed)};
  }

 private:
  struct Server {
    bool lost = false;
    bool refusing = false;
    std::string reason;
    Time since;  // When it was lost.
    // What was said last: whether lost, and why.
    bool said_lost = false;
    std::string said_reason;
    uint64_t held_back = 0;                       // Changes not said since.
    std::unordered_map<std::string, Time> kinds;  // When each kind of line was said last.
  };

  // Says the server's state, unless said already or a line of its kind was said within kQuiet.
  void Settle(const std::string& name, Server& server, Time now);
  bool Said(const Server& server) const;  // Whether its state is the one said last.
  static std::string Kind(const Server& server);
  void Count();  // counts() after a change.

  std::string what_;
  StoreLogSink sink_;
  std::unordered_map<std::string, Server> servers_;
  std::atomic<int> lost_{0};
  std::atomic<int> refusing_{0};
};

}  // namespace sluice::internal
