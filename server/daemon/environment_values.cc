#include "server/daemon/environment_values.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>

#include "fmt/format.h"

#include "sluice/duration.h"

namespace sluice::server::env {

absl::StatusOr<std::string> MemcacheStore(const std::optional<std::string>& host_port,
                                          const std::optional<std::string>& srv,
                                          const std::optional<std::string>& tls) {
  if (srv) {
    return Malformed("MEMCACHE_SRV", *srv,
                     "sluiced does not discover Memcached servers by DNS SRV records: list them "
                     "in MEMCACHE_HOST_PORT (host:port,host:port), or --store "
                     "memcached://host:port,host:port");
  }
  if (tls && GoBool(*tls).value_or(true)) {
    return Malformed("MEMCACHE_TLS", *tls,
                     "sluiced's Memcached store has no TLS (libmemcached speaks none)");
  }
  if (!host_port) {
    return Malformed("BACKEND_TYPE", "memcache", "MEMCACHE_HOST_PORT is not set (host:port,...)");
  }
  std::string list = *host_port;
  list.erase(std::remove(list.begin(), list.end(), ' '), list.end());
  if (list.empty() || list.front() == ',' || list.back() == ',' ||
      list.find(",,") != std::string::npos) {
    return Malformed("MEMCACHE_HOST_PORT", *host_port, "an empty entry: expected host:port,...");
  }
  return "memcached://" + list;
}

std::string JoinHostPort(std::string_view host, int port) {
  return host.find(':') == std::string_view::npos ? fmt::format("{}:{}", host, port)
                                                  : fmt::format("[{}]:{}", host, port);
}

absl::Status Malformed(std::string_view variable, std::string_view value, std::string_view why) {
  return absl::InvalidArgumentError(fmt::format("{}={}: {}", variable, value, why));
}

std::optional<bool> GoBool(std::string_view text) {
  for (std::string_view yes : {"1", "t", "T", "TRUE", "true", "True"}) {
    if (text == yes) {
      return true;
    }
  }
  for (std::string_view no : {"0", "f", "F", "FALSE", "false", "False"}) {
    if (text == no) {
      return false;
    }
  }
  return std::nullopt;
}

std::optional<int64_t> Integer(std::string_view text) {
  if (text.starts_with('+')) {
    text.remove_prefix(1);
  }
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

std::optional<Micros> GoDuration(std::string_view text) {
  if (text == "0") {
    return Micros{0};
  }
  if (text.starts_with('+')) {
    text.remove_prefix(1);
  }
  static constexpr std::pair<std::string_view, int64_t> kUnits[] = {
      {"ns", 1},         {"us", 1'000},        {"\xC2\xB5s", 1'000},  {"\xCE\xBCs", 1'000},
      {"ms", 1'000'000}, {"s", 1'000'000'000}, {"m", 60'000'000'000}, {"h", 3'600'000'000'000}};
  double nanos = 0;
  while (!text.empty()) {
    size_t digits = 0;
    while (digits < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) {
      ++digits;
    }
    double number = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + digits, number);
    if (digits == 0 || ec != std::errc() || end != text.data() + digits) {
      return std::nullopt;
    }
    text.remove_prefix(digits);
    // In kUnits, "ms" comes before "m": the first unit that fits is the right one.
    const auto* unit = std::find_if(std::begin(kUnits), std::end(kUnits),
                                    [&](const auto& u) { return text.starts_with(u.first); });
    if (unit == std::end(kUnits)) {
      return std::nullopt;
    }
    nanos += number * static_cast<double>(unit->second);
    text.remove_prefix(unit->first.size());
  }
  if (nanos > static_cast<double>(std::numeric_limits<int64_t>::max())) {
    return std::nullopt;
  }
  const auto whole = static_cast<int64_t>(nanos);
  return Micros{whole / 1000 + (whole % 1000 != 0 ? 1 : 0)};
}

absl::StatusOr<std::string> Convert(std::string_view variable, std::string_view value, Kind kind) {
  switch (kind) {
    case Kind::kSwitch:
      if (const std::optional<bool> on = GoBool(value)) {
        return std::string(*on ? "true" : "false");
      }
      return Malformed(variable, value, "expected true or false");
    case Kind::kCount: {
      const std::optional<int64_t> n = Integer(value);
      if (!n || *n < 1) {
        return Malformed(variable, value, "expected a whole number of at least 1");
      }
      return std::to_string(*n);
    }
    case Kind::kRatio: {
      double ratio = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), ratio);
      if (value.empty() || ec != std::errc() || end != value.data() + value.size()) {
        return Malformed(variable, value, "expected a number");
      }
      return std::string(value);
    }
    case Kind::kDuration:
    case Kind::kTimeout:
      if (const std::optional<Micros> d = GoDuration(value)) {
        return FormatDuration(*d);
      }
      return Malformed(variable, value, "expected a duration such as 10s, 250ms or 1m30s");
    case Kind::kText:
      return std::string(value);
  }
  return std::string(value);
}

}  // namespace sluice::server::env
