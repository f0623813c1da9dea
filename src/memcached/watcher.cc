#include "src/memcached/watcher.h"

namespace sluice::internal {

Watcher::Watcher(const MemcachedStoreOptions& options, ServerHealth& health)
    : interval_(options.retry_after_failure),
      probe_key_(options.key_prefix + "probe"),
      health_(health) {
  for (const MemcachedEndpoint& server : options.servers) {
    MemcachedStoreOptions one{.servers = {server}, .timeout = options.timeout};
    absl::StatusOr<std::unique_ptr<MemcachedConnection>> probe =
        MemcachedConnection::MakePrototype(one, health);
    if (probe.ok()) {  // It is: the store was made with these servers.
      probes_.push_back(*std::move(probe));
    }
  }
  thread_ = std::thread([this] { Run(); });
}

Watcher::~Watcher() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watcher::Run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    for (const std::unique_ptr<MemcachedConnection>& probe : probes_) {
      probe->Probe(probe_key_);
    }
    health_.Flush(std::chrono::steady_clock::now());
    lock.lock();
    wake_.wait_for(lock, interval_, [this] { return stopping_; });
  }
}

}  // namespace sluice::internal
