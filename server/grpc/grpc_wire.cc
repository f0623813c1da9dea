#include "server/grpc/grpc_wire.h"

#include <chrono>

#include "fmt/format.h"

namespace sluice::server {

GrpcCode GrpcCodeOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return GrpcCode::kOk;
    case absl::StatusCode::kInvalidArgument:
      return GrpcCode::kInvalidArgument;
    case absl::StatusCode::kResourceExhausted:
      return GrpcCode::kResourceExhausted;
    default:
      return GrpcCode::kUnavailable;
  }
}

std::optional<Micros> ParseGrpcTimeout(std::string_view value) {
  if (value.size() < 2 || value.size() > 9) {
    return std::nullopt;
  }
  int64_t amount = 0;
  for (const char c : value.substr(0, value.size() - 1)) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    amount = amount * 10 + (c - '0');  // At most 8 digits: no overflow below.
  }
  constexpr int64_t kPerHour = int64_t{3600} * 1'000'000;
  switch (value.back()) {
    case 'H':
      return Micros{amount * kPerHour};
    case 'M':
      return Micros{amount * 60'000'000};
    case 'S':
      return Micros{amount * 1'000'000};
    case 'm':
      return Micros{amount * 1'000};
    case 'u':
      return Micros{amount};
    case 'n':
      return Micros{(amount + 999) / 1'000};
    default:
      return std::nullopt;
  }
}

std::optional<uint64_t> DeclaredGrpcLength(std::string_view body) {
  if (body.size() < 5) {
    return std::nullopt;
  }
  const auto byte = [&](size_t i) { return static_cast<uint64_t>(static_cast<uint8_t>(body[i])); };
  return byte(1) << 24 | byte(2) << 16 | byte(3) << 8 | byte(4);
}

GrpcMessage OneGrpcMessage(std::string_view body, size_t max_bytes) {
  const std::optional<uint64_t> length = DeclaredGrpcLength(body);
  if (!length) {
    return {.error = {GrpcCode::kInternal, body.empty() ? "the request has no message"
                                                        : "the request's message is cut short"}};
  }
  if (body[0] != 0) {
    // Flag 1 is a compressed message; we take none (grpc-accept-encoding: identity). Any other
    // flag is not gRPC.
    return {.error = body[0] == 1
                         ? GrpcReply{GrpcCode::kUnimplemented,
                                     "compressed messages are not accepted (identity only)"}
                         : GrpcReply{GrpcCode::kInternal,
                                     fmt::format("a message flag of {} is not gRPC's",
                                                 static_cast<int>(static_cast<uint8_t>(body[0])))}};
  }
  if (*length > max_bytes) {
    return {.error = {GrpcCode::kResourceExhausted,
                      fmt::format("the request's message of {} bytes is over the limit of {}",
                                  *length, max_bytes)}};
  }
  if (body.size() - 5 != *length) {
    return {
        .error = {GrpcCode::kInternal, body.size() - 5 < *length
                                           ? "the request's message is cut short"
                                           : "a unary call's request holds more than one message"}};
  }
  return {.message = body.substr(5)};
}

std::string FrameGrpcMessage(std::string_view message) {
  std::string framed(5, '\0');
  const auto length = static_cast<uint32_t>(message.size());
  framed[1] = static_cast<char>(length >> 24);
  framed[2] = static_cast<char>(length >> 16);
  framed[3] = static_cast<char>(length >> 8);
  framed[4] = static_cast<char>(length);
  framed.append(message);
  return framed;
}

std::string PercentEncode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<uint8_t>(c);
    if (byte >= 0x20 && byte <= 0x7e && byte != '%') {
      out.push_back(c);
    } else {
      out.append(fmt::format("%{:02X}", byte));
    }
  }
  return out;
}

}  // namespace sluice::server
