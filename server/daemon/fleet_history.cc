#include "server/daemon/fleet_history.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "spdlog/spdlog.h"

#include "src/core/status.h"

namespace sluice::server {
namespace {

constexpr std::string_view kRecord = "limits";
constexpr size_t kFieldsPerCall = 1000;  // Keeps each script call short: Redis runs one at a time.

// The record as it is: identity to line.
absl::StatusOr<absl::flat_hash_map<std::string, std::string>> ReadRecord(RedisStore& redis) {
  absl::StatusOr<RedisStore::Record> record = redis.ReadRecord(kRecord);
  if (!record.ok()) {
    return record.status();
  }
  absl::flat_hash_map<std::string, std::string> lines;
  for (auto& [identity, line] : *record) {
    lines[std::move(identity)] = std::move(line);
  }
  return lines;
}

}  // namespace

std::shared_ptr<const LimitHistory> ReadFleetHistory(RedisStore& redis) {
  absl::StatusOr<absl::flat_hash_map<std::string, std::string>> record = ReadRecord(redis);
  if (!record.ok()) {
    spdlog::warn(
        "the fleet's limits could not be read from Redis ({}); limits changed since "
        "the fleet last loaded its rules start afresh",
        internal::Message(record.status()));
    return nullptr;
  }
  // Line by line: one that this server cannot read (a zone its tzdata lacks, a newer format)
  // loses that limit's figures only.
  LimitHistory history;
  size_t unreadable = 0;
  std::string first_error;
  for (const auto& [identity, line] : *record) {
    absl::StatusOr<LimitHistory> one = ParseHistory(line);
    if (!one.ok() || one->size() != 1 || !one->contains(identity)) {
      if (unreadable++ == 0) {
        first_error = one.ok() ? "its identity is not its field's" : one.status().ToString();
      }
      continue;
    }
    history.merge(*one);
  }
  if (unreadable > 0) {
    spdlog::warn(
        "{} of the fleet's limits in Redis are not readable here (the first: {}); "
        "those start afresh if they changed",
        unreadable, first_error);
  }
  return std::make_shared<const LimitHistory>(std::move(history));
}

void WriteFleetHistory(RedisStore& redis, const LimitHistory& history) {
  absl::StatusOr<absl::flat_hash_map<std::string, std::string>> record = ReadRecord(redis);
  if (!record.ok()) {
    spdlog::warn(
        "the fleet's limits could not be written to Redis ({}): a server restarted "
        "before the next load carries keys from older figures",
        internal::Message(record.status()));
    return;
  }
  std::vector<std::pair<std::string, std::string>> changed;
  for (const auto& [identity, figures] : history) {
    std::string line = FormatHistory({{identity, figures}});
    line.pop_back();  // The '\n'.
    if (const auto found = record->find(identity);
        found == record->end() || found->second != line) {
      changed.emplace_back(identity, std::move(line));
    }
  }
  for (size_t from = 0; from < changed.size(); from += kFieldsPerCall) {
    const size_t n = std::min(kFieldsPerCall, changed.size() - from);
    if (absl::Status s = redis.WriteRecord(kRecord, std::span(changed).subspan(from, n)); !s.ok()) {
      spdlog::warn(
          "the fleet's limits could not be written to Redis ({}): a server restarted "
          "before the next load carries keys from older figures",
          internal::Message(s));
      return;
    }
  }
}

}  // namespace sluice::server
