#include "src/memcached/workers.h"

#include <cstdlib>
#include <utility>

namespace sluice::internal {

Workers::Workers(int threads, const MemcachedConnection& prototype) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this, c = prototype.Clone()]() mutable { Run(std::move(c)); });
  }
}

Workers::~Workers() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (std::thread& t : threads_) {
    t.join();
  }
}

bool Workers::Post(Task task) {
  {
    std::lock_guard lock(mu_);
    if (queue_.size() >= kMaxQueued) {
      return false;
    }
    queue_.push_back(std::move(task));
  }
  ready_.notify_one();
  return true;
}

void Workers::Run(std::unique_ptr<MemcachedConnection> connection) {
  if (connection == nullptr) {
    std::abort();  // libmemcached could not allocate: out of memory is fatal (STYLE.md 2.4).
  }
  while (true) {
    Task task;
    {
      std::unique_lock lock(mu_);
      ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) {
        return;  // Stopping, and every task has run.
      }
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::move(task)(*connection);
  }
}

}  // namespace sluice::internal
