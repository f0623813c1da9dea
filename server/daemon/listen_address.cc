#include "server/daemon/listen_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <array>
#include <charconv>
#include <memory>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace sluice::server {
namespace {

bool IsIpAddress(const std::string& host) {
  std::array<unsigned char, sizeof(in6_addr)> bytes{};
  return inet_pton(AF_INET, host.c_str(), bytes.data()) == 1 ||
         inet_pton(AF_INET6, host.c_str(), bytes.data()) == 1;
}

// The numeric address `name` resolves to (see ListenAddress), or why it does not.
absl::StatusOr<std::string> Resolve(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(name.c_str(), nullptr, &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(gai_strerror(rc));
  }
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, &freeaddrinfo);
  const addrinfo* chosen = nullptr;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET && (chosen == nullptr || chosen->ai_family != AF_INET)) {
      chosen = a;
    } else if (a->ai_family == AF_INET6 && chosen == nullptr) {
      chosen = a;
    }
  }
  std::array<char, NI_MAXHOST> text{};
  if (chosen == nullptr || getnameinfo(chosen->ai_addr, chosen->ai_addrlen, text.data(),
                                       text.size(), nullptr, 0, NI_NUMERICHOST) != 0) {
    return absl::InvalidArgumentError("it has no IPv4 or IPv6 address");
  }
  return std::string(text.data());
}

}  // namespace

absl::StatusOr<HostPort> ParseHostPort(std::string_view flag, std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    return absl::InvalidArgumentError(fmt::format("{} '{}': expected HOST:PORT", flag, text));
  }
  std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  unsigned port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535) {
    return absl::InvalidArgumentError(
        fmt::format("{} '{}': '{}' is not a port number", flag, text, port_text));
  }
  return HostPort{.host = host.empty() ? "0.0.0.0" : std::string(host),
                  .port = static_cast<uint16_t>(port)};
}

absl::StatusOr<HostPort> ListenAddress(std::string_view flag, std::string_view text) {
  absl::StatusOr<HostPort> address = ParseHostPort(flag, text);
  if (!address.ok()) {
    return address;
  }
  if (text.starts_with(':')) {
    spdlog::info(
        "{} '{}': listening on every IPv4 interface (0.0.0.0); 127.0.0.1{} is this "
        "machine alone",
        flag, text, text);
    return address;
  }
  if (IsIpAddress(address->host)) {
    return address;
  }
  absl::StatusOr<std::string> resolved = Resolve(address->host);
  if (!resolved.ok()) {
    return absl::InvalidArgumentError(fmt::format("{} '{}': cannot resolve '{}': {}", flag, text,
                                                  address->host,
                                                  std::string(resolved.status().message())));
  }
  spdlog::info("{} '{}': {} is {}", flag, text, address->host, *resolved);
  address->host = *std::move(resolved);
  return address;
}

}  // namespace sluice::server
