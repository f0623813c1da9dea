#include "server/daemon/snapshot_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <system_error>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

#include "src/core/replace_file.h"
#include "src/core/status.h"

namespace sluice::server {
namespace {

std::string Reason() { return std::generic_category().message(errno); }

// What WriteSnapshotFile needs: a temporary file of its own beside `path`, renamed over it.
absl::Status CheckWritable(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    return absl::UnavailableError(fmt::format("{} is a directory", path));
  }
  std::string temp = path + ".XXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) {
    return absl::UnavailableError(
        fmt::format("cannot create a file beside {}: {}", path, Reason()));
  }
  ::close(fd);
  if (::unlink(temp.c_str()) != 0) {
    return absl::UnavailableError(fmt::format("cannot remove {}: {}", temp, Reason()));
  }
  return absl::OkStatus();
}

// "20261123T182838Z".
std::string UtcStamp(Timestamp now) {
  const auto seconds = static_cast<std::time_t>(
      std::chrono::floor<std::chrono::seconds>(now.time_since_epoch()).count());
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  return fmt::format("{:04}{:02}{:02}T{:02}{:02}{:02}Z", utc.tm_year + 1900, utc.tm_mon + 1,
                     utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec);
}

// The first line of a limits file, and the most it may hold.
constexpr char kHistoryHeader[] = "sluice limits 1\n";
constexpr size_t kMaxHistoryBytes = size_t{1} << 28;

// The limits' history beside the snapshot at `snapshot_path`.
std::string HistoryPath(const std::string& snapshot_path) { return snapshot_path + ".limits"; }

}  // namespace

absl::Status OpenSnapshot(MemoryStore& store, const std::string& path, bool discard_corrupt,
                          Timestamp now) {
  if (absl::Status s = CheckWritable(path); !s.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("--snapshot {}: it could not be written at shutdown, and every count would "
                    "be lost: {}",
                    path, internal::Message(s)));
  }
  const absl::StatusOr<size_t> loaded = store.LoadSnapshot(path, now);
  if (loaded.ok()) {
    spdlog::info("loaded {} key(s) from snapshot {}", *loaded, path);
    return absl::OkStatus();
  }
  if (loaded.status().code() == absl::StatusCode::kNotFound) {
    spdlog::info("no snapshot at {} yet: starting empty", path);
    return absl::OkStatus();
  }
  const std::string why(internal::Message(loaded.status()));
  // Only a file that was read and found unusable is corrupt: one that could not be read (no
  // permission, an I/O error) may be whole, and is never moved aside.
  if (!discard_corrupt || loaded.status().code() != absl::StatusCode::kDataLoss) {
    return absl::InvalidArgumentError(fmt::format(
        "--snapshot: {}. Not starting over it (it would be overwritten at shutdown): move it "
        "away, or pass --snapshot-discard-corrupt to have it moved aside and start empty",
        why));
  }
  const std::string aside = fmt::format("{}.corrupt-{}", path, UtcStamp(now));
  if (::rename(path.c_str(), aside.c_str()) != 0) {
    return absl::InvalidArgumentError(fmt::format(
        "--snapshot-discard-corrupt: {}; cannot move it aside to {}: {}", why, aside, Reason()));
  }
  spdlog::warn("{}: moved it aside to {} (--snapshot-discard-corrupt); starting empty", why, aside);
  return absl::OkStatus();
}

absl::Status SaveLimitHistory(const std::string& snapshot_path, const LimitHistory& history) {
  // As the snapshot is written (internal::ReplaceFile): a crash leaves the old history or the
  // new, never half of one.
  return internal::ReplaceFile(HistoryPath(snapshot_path), kHistoryHeader + FormatHistory(history),
                               0600);
}

LimitHistory LoadLimitHistory(const std::string& snapshot_path) {
  const std::string path = HistoryPath(snapshot_path);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno != ENOENT) {
      spdlog::warn("cannot read {}: {}; limits changed since it was written start afresh", path,
                   Reason());
    }
    return {};
  }
  // Bounded: a rules file holds at most a million limits (RuleFileLimits::max_limits).
  in.seekg(0, std::ios::end);
  const auto size = static_cast<size_t>(std::max<std::streamoff>(0, in.tellg()));
  in.seekg(0, std::ios::beg);
  std::string body(std::min(size, kMaxHistoryBytes + 1), '\0');
  in.read(body.data(), static_cast<std::streamsize>(body.size()));
  body.resize(static_cast<size_t>(in.gcount()));
  if (size > kMaxHistoryBytes || !body.starts_with(kHistoryHeader)) {
    spdlog::warn(
        "{} is not a sluice limits file of this version (or is over {} bytes); limits "
        "changed since it was written start afresh",
        path, kMaxHistoryBytes);
    return {};
  }
  absl::StatusOr<LimitHistory> history =
      ParseHistory(std::string_view(body).substr(std::string_view(kHistoryHeader).size()));
  if (!history.ok()) {
    spdlog::warn("{}: {}; limits changed since it was written start afresh", path,
                 internal::Message(history.status()));
    return {};
  }
  return *std::move(history);
}

}  // namespace sluice::server
