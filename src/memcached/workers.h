#pragma once

// The threads of a MemcachedStore: each owns a MemcachedConnection of its own (libmemcached
// blocks while a server answers, and a memcached_st serves one thread at a time) and runs the
// tasks posted to a shared queue, first in, first out. The queue is bounded (kMaxQueued): when
// the servers slow down, callers hear so at once rather than wait behind a backlog that grows
// without end.
//
// Thread-safe: Post from any thread. The destructor runs the tasks still queued, then joins.

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"

#include "src/memcached/connection.h"

namespace sluice::internal {

class Workers {
 public:
  using Task = absl::AnyInvocable<void(MemcachedConnection&) &&>;

  // Starts `threads` threads, each with a clone of `prototype` (which must outlive this).
  Workers(int threads, const MemcachedConnection& prototype);
  ~Workers();
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  static constexpr size_t kMaxQueued = 16'384;

  // Queues `task`; false (and `task` not run) when kMaxQueued tasks wait already.
  [[nodiscard]] bool Post(Task task);

 private:
  void Run(std::unique_ptr<MemcachedConnection> connection);

  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<Task> queue_;  // Guarded by mu_.
  bool stopping_ = false;   // Guarded by mu_.
  std::vector<std::thread> threads_;
};

}  // namespace sluice::internal
