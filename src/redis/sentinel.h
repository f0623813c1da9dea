#pragma once

// Redis Sentinel for RedisStore (redis+sentinel://): finding the master and following it.
//
// The store's one node (redis_store_impl.h) starts without an address. The Sentinel asks the
// sentinels in turn, on a connection of its own, SENTINEL get-master-addr-by-name, then
// SUBSCRIBEs there to +switch-master and keeps listening. An address other than the node's
// moves the node: its connections close (what they carried fails, and the failure policy
// answers it) and reopen at the new address. Each master connection checks with ROLE, as it
// opens, that the server is a master: a demoted one (the old master, back as a replica)
// is refused. Whenever a master connection fails (refused, lost, timed out, READONLY, a
// replica), the store asks again, at most once per kAskInterval: a +switch-master missed
// while no sentinel was listened to is then caught up.
//
// A sentinel that does not answer, refuses AUTH, or does not know the master is left for the
// next; after a whole round without an answer, the next round waits a backoff
// (options.backoff_min doubling up to backoff_max).
//
// Not thread-safe: it lives on the store's I/O thread, as the connections do; the pure
// functions in `internal` are thread-safe.

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "boost/asio/steady_timer.hpp"
#include <hiredis/hiredis.h>

#include "sluice/redis_store.h"
#include "src/redis/redis_store_impl.h"
#include "src/redis/resp.h"
#include "src/redis/stream.h"

namespace sluice {
namespace internal {

// Whether a reply to ROLE says "master".
bool IsMasterRole(const redisReply& reply);

// The address in a reply to SENTINEL get-master-addr-by-name ([ip, port]); nullopt for nil
// (the sentinel does not know the name) or anything else.
std::optional<RedisEndpoint> ReadMasterAddress(const redisReply& reply);

// The new address in a +switch-master message's payload, "<name> <old ip> <old port> <new ip>
// <new port>", if it is about `master_name`; nullopt otherwise.
std::optional<RedisEndpoint> ReadSwitchMaster(std::string_view payload,
                                              std::string_view master_name);

// RedisStore::Create's checks of where Redis is: endpoints, or sentinels and a master's name.
// InvalidArgument naming what is wrong.
absl::Status CheckWhereRedisIs(const RedisStoreOptions& options);

}  // namespace internal

class RedisStore::Impl::Sentinel {
 public:
  // The store must outlive it (it owns it).
  explicit Sentinel(Impl& store);
  ~Sentinel();
  Sentinel(const Sentinel&) = delete;
  Sentinel& operator=(const Sentinel&) = delete;

  // With options.sentinel, a Sentinel that has added the store's node, without an address
  // yet, and asks the first sentinel; null without.
  static std::unique_ptr<Sentinel> Start(Impl& store);
  // The master may have moved: ask again (now, or when kAskInterval has passed since the last
  // question; nothing if a question is on its way).
  void AskAgain();
  // For the store's shutdown: closes the sentinel connection and stops every timer.
  void Stop();

  // Whether a sentinel has named a master yet. Until then the node's calls wait (within their
  // deadline) rather than fail at once for want of a connection.
  bool master_known() const { return master_known_; }

 private:
  enum class State { kIdle, kAsking, kWatching };
  enum class Expect { kAuth, kAddress, kSubscribe };

  // A session with the sentinel at `at_`: connect, AUTH, ask, subscribe.
  void Open();
  void OnConnected();
  // The sentinel at `at_` failed (`why`): on to the next one, or a backoff after a round.
  void Next(const absl::Status& why);
  void TimedOut();  // The sentinel at `at_` did not answer in time.
  void Close();
  void Send(std::string command, Expect expect);
  void Flush();
  void Read();
  void OnReply(internal::ReplyPtr reply);
  // Points the node at `master`, if it is not there already.
  void SwitchTo(const RedisEndpoint& master);
  // Calls `then` after `delay`, unless another Arm or Disarm comes first.
  void Arm(std::chrono::milliseconds delay, void (Sentinel::*then)());
  void Disarm();
  std::string Here() const;  // "sentinel at host:port", for messages.

  Impl& store_;
  const RedisSentinelOptions& options_;  // The store's options_.sentinel.
  State state_ = State::kIdle;
  bool master_known_ = false;
  size_t at_ = 0;     // The sentinel asked now: an index into options_.endpoints.
  size_t tried_ = 0;  // Sentinels that failed in a row, this round.
  std::chrono::milliseconds backoff_;
  SteadyTime asked_at_;  // When the last session opened.
  std::shared_ptr<internal::RedisStream> stream_;
  uint64_t generation_ = 0;  // Of the session: handlers of an old one do nothing.
  boost::asio::steady_timer timer_;
  uint64_t timer_generation_ = 0;  // Of the latest Arm: an earlier one's handler does nothing.
  bool timer_armed_ = false;
  std::deque<Expect> expected_;
  internal::WriteQueue writes_;  // Commands not yet written, and being written.
  std::array<char, 4096> in_;
  redisReader* reader_ = nullptr;
};

}  // namespace sluice
