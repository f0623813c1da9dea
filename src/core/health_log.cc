#include "src/core/health_log.h"

#include <utility>

#include "fmt/format.h"

namespace sluice::internal {
namespace {

// "250 ms", "3.2 s", "12 min".
std::string Lasted(std::chrono::steady_clock::duration d) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  if (ms < 1000) {
    return fmt::format("{} ms", ms);
  }
  if (ms < 120'000) {
    return fmt::format("{:.1f} s", static_cast<double>(ms) / 1000);
  }
  return fmt::format("{} min", ms / 60'000);
}

}  // namespace

void HealthLog::Lost(std::string_view server, std::string_view reason, bool refusing, Time now) {
  auto [it, fresh] = servers_.try_emplace(std::string(server));
  Server& s = it->second;
  if (!s.lost) {
    s.since = now;
  }
  s.lost = true;
  s.refusing = refusing;
  s.reason = std::string(reason);
  Count();
  Settle(it->first, s, now);
}

void HealthLog::Connected(std::string_view server, Time now) {
  auto it = servers_.find(std::string(server));
  if (it != servers_.end() && it->second.lost && !it->second.refusing) {
    it->second.lost = false;
    Count();
    Settle(it->first, it->second, now);
  }
}

void HealthLog::Answered(std::string_view server, Time now) {
  auto it = servers_.find(std::string(server));
  if (it != servers_.end() && it->second.lost) {
    it->second.lost = false;
    Count();
    Settle(it->first, it->second, now);
  }
}

void HealthLog::Moved(std::string_view from, std::string_view line) {
  servers_.erase(std::string(from));
  Count();
  if (sink_) {
    sink_(StoreLogLevel::kInfo, line);
  }
}

void HealthLog::Flush(Time now) {
  for (auto& [name, server] : servers_) {
    Settle(name, server, now);
  }
}

std::optional<HealthLog::Time> HealthLog::due() const {
  std::optional<Time> earliest;
  for (const auto& [name, server] : servers_) {
    if (server.held_back == 0 || Said(server)) {
      continue;
    }
    auto said = server.kinds.find(Kind(server));
    const Time at = said == server.kinds.end() ? Time() : said->second + kQuiet;
    earliest = earliest ? std::min(*earliest, at) : at;
  }
  return earliest;
}

bool HealthLog::lost(std::string_view server) const {
  auto it = servers_.find(std::string(server));
  return it != servers_.end() && it->second.lost;
}

bool HealthLog::refusing(std::string_view server) const {
  auto it = servers_.find(std::string(server));
  return it != servers_.end() && it->second.lost && it->second.refusing;
}

void HealthLog::Count() {
  int lost = 0;
  int refusing = 0;
  for (const auto& [name, server] : servers_) {
    if (server.lost) {
      ++(server.refusing ? refusing : lost);
    }
  }
  lost_.store(lost, std::memory_order_relaxed);
  refusing_.store(refusing, std::memory_order_relaxed);
}

bool HealthLog::Said(const Server& server) const {
  return server.said_lost == server.lost && (!server.lost || server.said_reason == server.reason);
}

std::string HealthLog::Kind(const Server& server) {
  // Back from one cause is not back from another: only a repeat of the same is held back.
  return (server.lost ? "lost: " : "back: ") + server.reason;
}

void HealthLog::Settle(const std::string& name, Server& server, Time now) {
  if (Said(server)) {
    return;
  }
  const std::string kind = Kind(server);
  auto said = server.kinds.find(kind);
  if (said != server.kinds.end() && now - said->second < kQuiet) {
    ++server.held_back;
    return;
  }
  std::string line = !server.lost ? fmt::format("{} at {} is back after {} ({})", what_, name,
                                                Lasted(now - server.since), server.reason)
                     : server.said_lost
                         ? fmt::format("{} at {} is still lost: {}", what_, name, server.reason)
                         : fmt::format("{} at {} {}: {}", what_, name,
                                       server.refusing ? "cannot decide" : "lost", server.reason);
  if (server.held_back > 0) {
    line +=
        fmt::format(" ({} change(s) held back in the last {} s)", server.held_back, kQuiet.count());
  }
  if (server.kinds.size() > 16) {  // Reasons vary: keep those that still hold lines back.
    std::erase_if(server.kinds, [&](const auto& k) { return now - k.second >= kQuiet; });
  }
  server.kinds[kind] = now;
  server.said_lost = server.lost;
  server.said_reason = server.reason;
  server.held_back = 0;
  if (sink_) {
    sink_(server.lost ? StoreLogLevel::kWarning : StoreLogLevel::kInfo, line);
  }
}

}  // namespace sluice::internal
