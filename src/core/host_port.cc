#include "src/core/host_port.h"

#include <charconv>

#include "fmt/format.h"

namespace sluice::internal {

absl::StatusOr<HostPort> ParseHostPort(std::string_view text, uint16_t default_port) {
  HostPort out{.host = "", .port = default_port};
  std::string_view port;
  if (text.starts_with('[')) {  // [IPv6]:port
    const size_t close = text.find(']');
    if (close == std::string_view::npos) {
      return absl::InvalidArgumentError("an IPv6 address needs its closing ']'");
    }
    out.host = std::string(text.substr(1, close - 1));
    text.remove_prefix(close + 1);
    if (!text.empty() && !text.starts_with(':')) {
      return absl::InvalidArgumentError("expected ':port' after ']'");
    }
    port = text.empty() ? "" : text.substr(1);
  } else {
    const size_t colon = text.find(':');
    out.host = std::string(text.substr(0, colon));
    port = colon == std::string_view::npos ? "" : text.substr(colon + 1);
  }
  if (out.host.empty()) {
    return absl::InvalidArgumentError("no host");
  }
  if (!port.empty()) {
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value < 1 || value > 65535) {
      return absl::InvalidArgumentError(
          fmt::format("port '{}' is not a number from 1 to 65535", port));
    }
    out.port = static_cast<uint16_t>(value);
  }
  return out;
}

}  // namespace sluice::internal
