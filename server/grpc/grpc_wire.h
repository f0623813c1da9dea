#pragma once

// gRPC's wire format over HTTP/2, the parts of it our own engine (h2_connection.h) reads and
// writes (grpc/grpc's doc/PROTOCOL-HTTP2.md): a message's five-byte prefix, the grpc-timeout
// header, the percent-encoded grpc-message, and the statuses. Pure functions: thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

#include "sluice/clock.h"

namespace sluice::server {

// gRPC's status codes (grpc::StatusCode's numbers, which are the wire's).
enum class GrpcCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kResourceExhausted = 8,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
};

// What a call ends with: its status and, when OK, the response message's bytes.
struct GrpcReply {
  GrpcCode code = GrpcCode::kOk;
  std::string message;  // grpc-message: why, for a status other than OK.
  std::string body;     // The serialized response message (OK only).
};

// A decision's error as gRPC says it. A store that did not answer in time (DeadlineExceeded:
// Redis's --redis-timeout) is the service unavailable, as a store that cannot be reached:
// UNAVAILABLE, which Envoy's failure_mode_deny reads; gRPC's DEADLINE_EXCEEDED would say the
// caller's own deadline passed.
GrpcCode GrpcCodeOf(const absl::Status& status);

// The largest request message the engine reads (gRPC's default receive limit); a larger one is
// answered RESOURCE_EXHAUSTED without being read further.
inline constexpr size_t kMaxGrpcMessageBytes = size_t{4} << 20;

// A grpc-timeout value ("100m", "1S": 1 to 8 digits and a unit of H M S m u n) as a time,
// rounded up to a microsecond; nullopt when it is not one (the engine then gives the call no
// deadline of its own, as grpc++ does with a value it cannot read).
std::optional<Micros> ParseGrpcTimeout(std::string_view value);

// The one message of a unary call's request body (every DATA frame of its stream, joined):
// a prefix of a flag byte and a big-endian length, then that many bytes. Errors, each a
// reply to send: a compressed message (UNIMPLEMENTED: we accept identity only, and say so in
// grpc-accept-encoding), a body that is not exactly one whole message (INTERNAL), one over
// `max_bytes` (RESOURCE_EXHAUSTED).
struct GrpcMessage {
  std::optional<std::string_view> message;  // Into the body.
  GrpcReply error;                          // When !message.
};
GrpcMessage OneGrpcMessage(std::string_view body, size_t max_bytes);

// The length a body's first message declares, once its prefix is there (to refuse an oversized
// one before it is read whole); nullopt while fewer than five bytes are in.
std::optional<uint64_t> DeclaredGrpcLength(std::string_view body);

// `message` framed as one gRPC message, uncompressed.
std::string FrameGrpcMessage(std::string_view message);

// grpc-message's encoding: bytes outside printable ASCII, and '%', as %XX.
std::string PercentEncode(std::string_view text);

}  // namespace sluice::server
