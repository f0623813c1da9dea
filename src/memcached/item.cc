#include "src/memcached/item.h"

#include <algorithm>
#include <variant>

#include "fmt/format.h"

#include "src/memory/snapshot.h"

namespace sluice::internal {
namespace {

// Changes when the encoding does: an item of another version is refused, not misread.
constexpr uint8_t kItemVersion = 1;

}  // namespace

std::string EncodeItem(const AnyState& state) {
  SnapshotWriter w;
  w.U8(kItemVersion);
  w.U8(static_cast<uint8_t>(state.index()));
  std::visit([&](const auto& s) { Encode(s, w); }, state);
  return w.data();
}

absl::StatusOr<AnyState> DecodeItem(const Limit& limit, std::string_view value,
                                    std::string_view item_key) {
  SnapshotReader r(value);
  uint8_t version = 0;
  uint8_t algorithm = 0;
  AnyState state = InitialState(limit.algorithm());
  if (r.U8(version) && version == kItemVersion && r.U8(algorithm) &&
      algorithm == static_cast<uint8_t>(limit.algorithm()) &&
      std::visit([&](auto& s) { return Decode(r, s); }, state) && r.at_end() &&
      std::visit([&](const auto& s) { return Plausible(limit, s); }, state)) {
    return state;
  }
  return absl::InternalError(
      fmt::format("memcached item '{}' ({} bytes) does not hold a state of {} written by sluice",
                  item_key, value.size(), limit.ToString()));
}

int64_t ExptimeOf(Micros reset_after, Micros margin) {
  constexpr int64_t kSecond = 1'000'000;
  const int64_t us = reset_after.count();
  if (us >= kMaxRelativeExptime * kSecond) {
    return 0;  // Never: a horizon Memcached's relative exptime cannot say.
  }
  const int64_t total = us + std::min<int64_t>(margin.count(), kMaxRelativeExptime * kSecond);
  const int64_t seconds = std::max<int64_t>(1, (total + kSecond - 1) / kSecond);
  return seconds > kMaxRelativeExptime ? 0 : seconds;
}

std::optional<int64_t> OnceExptime(Timestamp once_until, Timestamp now, Micros margin) {
  constexpr int64_t kSecond = 1'000'000;
  if (once_until <= now) {
    return std::nullopt;
  }
  // Times below kLatest (2200) and a margin of at most 30 days: no overflow.
  const Micros m = std::min(margin, Micros(kMaxRelativeExptime * kSecond));
  const int64_t relative = (once_until - now + m).count();
  if (relative <= kMaxRelativeExptime * kSecond) {
    return (relative + kSecond - 1) / kSecond;
  }
  const int64_t absolute = (once_until + m).time_since_epoch().count();
  return (absolute + kSecond - 1) / kSecond;
}

}  // namespace sluice::internal
