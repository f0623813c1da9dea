#pragma once

// Reloader: the rules reloaded on a thread of their own, apart from the thread that handles
// signals and from the event loops. Reading and parsing a rules file can take seconds (100,000
// rules) or, for a hostile file, longer than anyone waits; SIGTERM must still stop the server
// at once, so the control loop only asks for a reload and never waits for one.
//
// One reload at a time. A reload asked for while one is loading is coalesced: one more runs
// when that one ends, reading the files as they are then. Stop discards a reload in progress
// (its result is never applied) and does not wait for it.
//
// Thread-safe: Request and Stop may be called from any thread; `apply` runs on the reloader's
// thread, under its lock, never after Stop has returned.

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

#include "server/rules/rules.h"

namespace sluice::server {

class Reloader {
 public:
  using Rules = absl::StatusOr<std::shared_ptr<const RuleSet>>;
  // Reads and parses the rules: slow, perhaps never ending. Runs on the reloader's thread.
  using Load = std::function<Rules()>;
  // Puts loaded rules in force, or reports why they were refused; `why` is what asked.
  using Apply = std::function<void(Rules rules, const std::string& why)>;

  // Starts the thread; it waits for Request.
  Reloader(Load load, Apply apply);
  // Stop, if not called yet.
  ~Reloader();
  Reloader(const Reloader&) = delete;
  Reloader& operator=(const Reloader&) = delete;

  // Asks for a reload (`why`: "SIGHUP", "file changed"). Returns at once. Ignored after Stop.
  void Request(std::string why);

  // Takes no more requests and discards the reload in progress, if any. Returns true when the
  // thread has ended (it was idle); false when it is still inside `load`: it is then detached,
  // and what `load` uses must outlive the process (the caller exits without destroying it).
  [[nodiscard]] bool Stop();

 private:
  // Shared with the thread, so that a detached thread never touches a destroyed Reloader.
  struct State {
    std::mutex mutex;
    std::condition_variable wake;
    std::optional<std::string> pending;  // A reload asked for and not started; guarded.
    bool loading = false;                // Inside `load`; guarded.
    bool stopping = false;               // Guarded.
  };
  static void Run(const std::shared_ptr<State>& state, const Load& load, const Apply& apply);

  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::thread thread_;
  std::optional<bool> stopped_;  // Stop's answer, once called.
};

}  // namespace sluice::server
