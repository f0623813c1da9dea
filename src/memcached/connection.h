#pragma once

// One set of connections to the Memcached servers (a memcached_st of libmemcached): the
// operations the store's gets/cas loops and resets need, with libmemcached's answers turned into
// statuses. The servers, ketama hashing and the timeouts are set once on a prototype
// (MakePrototype); each thread of the store uses a clone of its own.
//
// Thread-compatible: one thread at a time per Connection (libmemcached's rule for a
// memcached_st).

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

#include "sluice/memcached_store.h"
#include "src/memcached/server_health.h"

struct memcached_st;

namespace sluice::internal {

struct MemcachedItem {
  std::string value;
  uint64_t cas = 0;
};

class MemcachedConnection {
 public:
  // A prototype with `options`' servers, ketama distribution and timeouts; connects lazily.
  // It and its clones tell `health` (which must outlive them) of each server lost and back.
  // InvalidArgument when libmemcached refuses a server.
  static absl::StatusOr<std::unique_ptr<MemcachedConnection>> MakePrototype(
      const MemcachedStoreOptions& options, ServerHealth& health);
  // A connection set of its own, with the prototype's servers and settings. Null when
  // libmemcached cannot allocate one.
  std::unique_ptr<MemcachedConnection> Clone() const;
  ~MemcachedConnection();
  MemcachedConnection(const MemcachedConnection&) = delete;
  MemcachedConnection& operator=(const MemcachedConnection&) = delete;

  // The item at `key` with its cas unique; nullopt when there is none.
  absl::StatusOr<std::optional<MemcachedItem>> Gets(std::string_view key);
  // Stores a new item: true when stored, false when one already exists.
  absl::StatusOr<bool> Add(std::string_view key, std::string_view value, int64_t exptime_s);
  // Replaces the item if its cas unique is still `cas`: true when stored, false when it was
  // changed or removed since it was read.
  absl::StatusOr<bool> Cas(std::string_view key, std::string_view value, int64_t exptime_s,
                           uint64_t cas);
  // Removes the item at `key`: OK also when there is none.
  absl::Status Delete(std::string_view key);

  // Reads `key` (a probe: src/memcached/watcher.h) and tells the health what it found of the
  // key's server: connected when it answers, lost when it cannot (why). (Not `version`, which
  // libmemcached asks a server once and then answers from memory.)
  void Probe(std::string_view key);

 private:
  MemcachedConnection(memcached_st* mc, ServerHealth& health) : mc_(mc), health_(health) {}
  // libmemcached's failure `rc` as a status; the server lost when it is the server's fault.
  absl::Status Failed(int rc, std::string_view op, std::string_view key);
  void Answered(std::string_view key);  // `key`'s server answered: back if it was lost.

  memcached_st* mc_;
  ServerHealth& health_;
};

// Whether `status` says the servers could not decide (unreachable, timeout, marked failed,
// refusing a write, cas retries exhausted): the failure policy's errors.
bool IsMemcachedUnavailable(const absl::Status& status);

}  // namespace sluice::internal
