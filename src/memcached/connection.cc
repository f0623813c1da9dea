#include "src/memcached/connection.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "fmt/format.h"
#include <libmemcached-1.0/memcached.h>

namespace sluice::internal {
namespace {

// The server `key` lives on, "host:port", for messages.
std::string ServerOf(memcached_st* mc, std::string_view key) {
  memcached_return_t rc = MEMCACHED_SUCCESS;
  const memcached_instance_st* server = memcached_server_by_key(mc, key.data(), key.size(), &rc);
  if (server == nullptr) {
    return "?";
  }
  return fmt::format("{}:{}", memcached_server_name(server), memcached_server_port(server));
}

// What libmemcached's failure `rc` is: the servers' (a timeout; unreachable, marked failed or
// refusing a write: the failure policy decides), or the call's own (Internal).
absl::StatusCode CodeOf(memcached_return_t rc) {
  switch (rc) {
    case MEMCACHED_TIMEOUT:
      return absl::StatusCode::kDeadlineExceeded;
    case MEMCACHED_CONNECTION_FAILURE:
    case MEMCACHED_HOST_LOOKUP_FAILURE:
    case MEMCACHED_WRITE_FAILURE:
    case MEMCACHED_READ_FAILURE:
    case MEMCACHED_UNKNOWN_READ_FAILURE:
    case MEMCACHED_ERRNO:
    case MEMCACHED_SERVER_MARKED_DEAD:
    case MEMCACHED_SERVER_TEMPORARILY_DISABLED:
    case MEMCACHED_SERVER_MEMORY_ALLOCATION_FAILURE:
    case MEMCACHED_SERVER_ERROR:  // "SERVER_ERROR out of memory storing object" (-M)
    case MEMCACHED_NO_SERVERS:
    case MEMCACHED_PARTIAL_READ:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

// libmemcached's answer as a status naming the server, the operation and the item.
// (memcached_last_error_message would add a pointer and libmemcached's source line.)
absl::Status StatusOf(memcached_st* mc, memcached_return_t rc, std::string_view op,
                      std::string_view key) {
  const std::string message = fmt::format("memcached {}: {} '{}': {}", ServerOf(mc, key), op, key,
                                          memcached_strerror(mc, rc));
  switch (CodeOf(rc)) {
    case absl::StatusCode::kDeadlineExceeded:
      return absl::DeadlineExceededError(message);
    case absl::StatusCode::kUnavailable:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

// Why the server cannot decide, for the health log: libmemcached's words and the system's
// (no key, no operation: one line per cause, not per call). Empty when `rc` is not the
// server's fault, or only says that the server was marked failed by an earlier failure (which
// was reported then).
std::string LostReason(memcached_st* mc, memcached_return_t rc) {
  if (CodeOf(rc) == absl::StatusCode::kInternal || rc == MEMCACHED_SERVER_MARKED_DEAD ||
      rc == MEMCACHED_SERVER_TEMPORARILY_DISABLED || rc == MEMCACHED_NO_SERVERS) {
    return "";
  }
  const int error = memcached_last_error_errno(mc);
  return error == 0 ? std::string(memcached_strerror(mc, rc))
                    : fmt::format("{} ({})", memcached_strerror(mc, rc), std::strerror(error));
}

}  // namespace

absl::Status MemcachedConnection::Failed(int code, std::string_view op, std::string_view key) {
  const auto rc = static_cast<memcached_return_t>(code);
  if (std::string reason = LostReason(mc_, rc); !reason.empty()) {
    const bool refusing =
        rc == MEMCACHED_SERVER_ERROR || rc == MEMCACHED_SERVER_MEMORY_ALLOCATION_FAILURE;
    health_.Lost(ServerOf(mc_, key), reason, refusing, std::chrono::steady_clock::now());
  }
  return StatusOf(mc_, rc, op, key);
}

void MemcachedConnection::Answered(std::string_view key) {
  if (health_.Watching()) [[unlikely]] {
    health_.Answered(ServerOf(mc_, key), std::chrono::steady_clock::now());
  }
}

absl::StatusOr<std::unique_ptr<MemcachedConnection>> MemcachedConnection::MakePrototype(
    const MemcachedStoreOptions& options, ServerHealth& health) {
  memcached_st* mc = memcached_create(nullptr);
  if (mc == nullptr) {
    return absl::ResourceExhaustedError("memcached: cannot allocate a client");
  }
  std::unique_ptr<MemcachedConnection> connection(new MemcachedConnection(mc, health));
  for (const MemcachedEndpoint& server : options.servers) {
    if (memcached_return_t rc = memcached_server_add(mc, server.host.c_str(), server.port);
        rc != MEMCACHED_SUCCESS) {
      return absl::InvalidArgumentError(fmt::format("memcached server {}:{}: {}", server.host,
                                                    server.port, memcached_strerror(mc, rc)));
    }
  }
  const auto timeout_ms = static_cast<uint64_t>(std::max<int64_t>(1, options.timeout.count()));
  const auto retry_s = static_cast<uint64_t>(
      std::max<int64_t>(1, (options.retry_after_failure.count() + 999) / 1000));
  const std::pair<memcached_behavior_t, uint64_t> behaviors[] = {
      // ketama: a server added or lost moves about 1/n of the keys.
      {MEMCACHED_BEHAVIOR_KETAMA, 1},
      {MEMCACHED_BEHAVIOR_SUPPORT_CAS, 1},
      {MEMCACHED_BEHAVIOR_TCP_NODELAY, 1},
      // Non-blocking sockets, so that the connect and poll timeouts apply.
      {MEMCACHED_BEHAVIOR_NO_BLOCK, 1},
      {MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, timeout_ms},
      {MEMCACHED_BEHAVIOR_POLL_TIMEOUT, timeout_ms},
      {MEMCACHED_BEHAVIOR_SND_TIMEOUT, timeout_ms * 1000},
      {MEMCACHED_BEHAVIOR_RCV_TIMEOUT, timeout_ms * 1000},
      // One failure marks a server failed until retry_after_failure: its calls fail at once
      // (the policy decides) rather than each waiting out a timeout. Not ejected from the
      // ring: its keys must not move to a server that lacks their state.
      {MEMCACHED_BEHAVIOR_SERVER_FAILURE_LIMIT, 1},
      {MEMCACHED_BEHAVIOR_RETRY_TIMEOUT, retry_s},
      {MEMCACHED_BEHAVIOR_AUTO_EJECT_HOSTS, 0},
      // The text protocol checks keys; ours are printable already (keys.h).
      {MEMCACHED_BEHAVIOR_VERIFY_KEY, 1},
  };
  for (const auto& [behavior, value] : behaviors) {
    if (memcached_return_t rc = memcached_behavior_set(mc, behavior, value);
        rc != MEMCACHED_SUCCESS) {
      return absl::InternalError(fmt::format("memcached: setting behaviour {}: {}",
                                             static_cast<int>(behavior),
                                             memcached_strerror(mc, rc)));
    }
  }
  return connection;
}

std::unique_ptr<MemcachedConnection> MemcachedConnection::Clone() const {
  memcached_st* mc = memcached_clone(nullptr, mc_);
  if (mc == nullptr) {
    return nullptr;
  }
  return std::unique_ptr<MemcachedConnection>(new MemcachedConnection(mc, health_));
}

MemcachedConnection::~MemcachedConnection() { memcached_free(mc_); }

absl::StatusOr<std::optional<MemcachedItem>> MemcachedConnection::Gets(std::string_view key) {
  const char* keys[] = {key.data()};
  const size_t lengths[] = {key.size()};
  if (memcached_return_t rc = memcached_mget(mc_, keys, lengths, 1); rc != MEMCACHED_SUCCESS) {
    return Failed(rc, "gets", key);
  }
  std::optional<MemcachedItem> item;
  memcached_return_t rc = MEMCACHED_SUCCESS;
  // Read to the end of the reply, so that the connection is ready for the next command.
  while (memcached_result_st* result = memcached_fetch_result(mc_, nullptr, &rc)) {
    item = MemcachedItem{
        .value = std::string(memcached_result_value(result), memcached_result_length(result)),
        .cas = memcached_result_cas(result)};
    memcached_result_free(result);
  }
  if (rc != MEMCACHED_END && rc != MEMCACHED_SUCCESS && rc != MEMCACHED_NOTFOUND) {
    return Failed(rc, "gets", key);
  }
  Answered(key);
  return item;
}

absl::StatusOr<bool> MemcachedConnection::Add(std::string_view key, std::string_view value,
                                              int64_t exptime_s) {
  const memcached_return_t rc = memcached_add(mc_, key.data(), key.size(), value.data(),
                                              value.size(), static_cast<time_t>(exptime_s), 0);
  if (rc == MEMCACHED_SUCCESS || rc == MEMCACHED_STORED || rc == MEMCACHED_NOTSTORED ||
      rc == MEMCACHED_DATA_EXISTS) {
    Answered(key);
    return rc == MEMCACHED_SUCCESS || rc == MEMCACHED_STORED;
  }
  return Failed(rc, "add", key);
}

absl::StatusOr<bool> MemcachedConnection::Cas(std::string_view key, std::string_view value,
                                              int64_t exptime_s, uint64_t cas) {
  const memcached_return_t rc = memcached_cas(mc_, key.data(), key.size(), value.data(),
                                              value.size(), static_cast<time_t>(exptime_s), 0, cas);
  if (rc == MEMCACHED_SUCCESS || rc == MEMCACHED_STORED || rc == MEMCACHED_DATA_EXISTS ||
      rc == MEMCACHED_NOTFOUND) {
    Answered(key);
    return rc == MEMCACHED_SUCCESS || rc == MEMCACHED_STORED;
  }
  return Failed(rc, "cas", key);
}

absl::Status MemcachedConnection::Delete(std::string_view key) {
  const memcached_return_t rc = memcached_delete(mc_, key.data(), key.size(), 0);
  if (rc == MEMCACHED_SUCCESS || rc == MEMCACHED_DELETED || rc == MEMCACHED_NOTFOUND) {
    Answered(key);
    return absl::OkStatus();
  }
  return Failed(rc, "delete", key);
}

void MemcachedConnection::Probe(std::string_view key) {
  const char* keys[] = {key.data()};
  const size_t lengths[] = {key.size()};
  memcached_return_t rc = memcached_mget(mc_, keys, lengths, 1);
  if (rc == MEMCACHED_SUCCESS) {
    while (memcached_result_st* result = memcached_fetch_result(mc_, nullptr, &rc)) {
      memcached_result_free(result);
    }
  }
  const auto now = std::chrono::steady_clock::now();
  if (rc == MEMCACHED_SUCCESS || rc == MEMCACHED_END || rc == MEMCACHED_NOTFOUND) {
    health_.Connected(ServerOf(mc_, key), now);
  } else if (std::string reason = LostReason(mc_, rc); !reason.empty()) {
    health_.Lost(ServerOf(mc_, key), reason, false, now);
  }
}

bool IsMemcachedUnavailable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

}  // namespace sluice::internal
