#include "src/memcached/server_health.h"

namespace sluice::internal {

void ServerHealth::Lost(std::string_view server, std::string_view reason, bool refusing, Time now) {
  std::lock_guard lock(mu_);
  log_.Lost(server, reason, refusing, now);
  Update(now);
}

void ServerHealth::Answered(std::string_view server, Time now) {
  std::lock_guard lock(mu_);
  log_.Answered(server, now);
  Update(now);
}

void ServerHealth::Connected(std::string_view server, Time now) {
  std::lock_guard lock(mu_);
  log_.Connected(server, now);
  Update(now);
}

void ServerHealth::Flush(Time now) {
  std::lock_guard lock(mu_);
  Update(now);
}

void ServerHealth::Update(Time now) {
  if (std::optional<Time> due = log_.due(); due && *due <= now) {
    log_.Flush(now);
  }
  const HealthLog::Counts counts = log_.counts();
  watching_.store(counts.lost + counts.refusing > 0 || log_.due().has_value(),
                  std::memory_order_relaxed);
}

}  // namespace sluice::internal
