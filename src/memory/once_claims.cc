#include "src/memory/once_claims.h"

#include "fmt/format.h"

namespace sluice::internal {
namespace {

// Debian's Abseil has a string_view of its own; the maps look up by it.
absl::string_view View(std::string_view s) { return {s.data(), s.size()}; }

}  // namespace

void OnceClaims::DropExpired(Timestamp now) {
  while (!by_expiry_.empty() && by_expiry_.begin()->first <= now) {
    until_.erase(by_expiry_.begin()->second);
    by_expiry_.erase(by_expiry_.begin());
  }
}

absl::Status OnceClaims::Claim(std::string_view id, Timestamp until, Timestamp now) {
  MutexLock lock(mu_);
  DropExpired(now);
  if (until_.contains(View(id))) {  // Live: the expired ones are gone.
    return absl::AlreadyExistsError("receipt was settled already");
  }
  if (until <= now) {
    return absl::OkStatus();  // Expired as it is made: nothing to keep.
  }
  if (until_.size() >= max_) {
    return absl::ResourceExhaustedError(fmt::format(
        "the memory store holds {} settled receipts that have not expired; try again later",
        until_.size()));
  }
  until_.emplace(std::string(id), until);
  by_expiry_.emplace(until, std::string(id));
  return absl::OkStatus();
}

void OnceClaims::Release(std::string_view id) {
  MutexLock lock(mu_);
  const auto it = until_.find(View(id));
  if (it == until_.end()) {
    return;
  }
  for (auto [e, end] = by_expiry_.equal_range(it->second); e != end; ++e) {
    if (e->second == id) {
      by_expiry_.erase(e);
      break;
    }
  }
  until_.erase(it);
}

size_t OnceClaims::size() const {
  MutexLock lock(mu_);
  return until_.size();
}

}  // namespace sluice::internal
