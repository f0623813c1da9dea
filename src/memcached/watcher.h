#pragma once

// Keeps a MemcachedStore's ServerHealth true when no call comes to show it (as a Redis
// store's connection shows Redis lost with no call made): a thread that reads an item that
// is never written from each server, one small round trip every `retry_after_failure` (1 s) on a
// connection of its own per server, so that a server stopped, or back (although a health check that
// fails keeps the calls away), shows within about a second. It also says the lines the health log
// holds back, once their time has come.
//
// Thread-safe; the destructor stops and joins the thread (at most one probe's timeout).

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sluice/memcached_store.h"
#include "src/memcached/connection.h"
#include "src/memcached/server_health.h"

namespace sluice::internal {

class Watcher {
 public:
  // `health` must outlive this.
  Watcher(const MemcachedStoreOptions& options, ServerHealth& health);
  ~Watcher();
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

 private:
  void Run();

  const std::chrono::milliseconds interval_;
  const std::string probe_key_;  // Read, never written: no item of ours has this name.
  ServerHealth& health_;
  std::vector<std::unique_ptr<MemcachedConnection>> probes_;  // One server each.
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // Guarded by mu_.
  std::thread thread_;     // Last: it uses the members above.
};

}  // namespace sluice::internal
