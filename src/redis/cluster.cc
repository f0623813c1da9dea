#include "src/redis/cluster.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>

#include "boost/asio/steady_timer.hpp"
#include "fmt/format.h"

#include "src/redis/connection.h"
#include "src/redis/keys.h"
#include "src/redis/redis_store_impl.h"
#include "src/redis/url.h"

namespace sluice {
namespace internal {

std::optional<std::pair<int, RedisEndpoint>> Redirection(std::string_view error) {
  const size_t first = error.find(' ');
  const size_t second = error.find(' ', first + 1);
  const size_t colon = error.rfind(':');
  if (first == std::string_view::npos || second == std::string_view::npos ||
      colon == std::string_view::npos || colon < second) {
    return std::nullopt;
  }
  const std::optional<unsigned> slot = WholeNumber(error.substr(first + 1, second - first - 1));
  const std::optional<unsigned> port = WholeNumber(error.substr(colon + 1));
  if (!slot || !port || *slot >= kSlotCount || *port == 0 || *port > 65535) {
    return std::nullopt;
  }
  return std::pair{static_cast<int>(*slot),
                   RedisEndpoint{std::string(error.substr(second + 1, colon - second - 1)),
                                 static_cast<uint16_t>(*port)}};
}

std::optional<std::vector<SlotRange>> ReadClusterSlots(const redisReply& reply,
                                                       const RedisEndpoint& asked) {
  if (reply.type != REDIS_REPLY_ARRAY) {
    return std::nullopt;
  }
  std::vector<SlotRange> ranges;
  for (size_t i = 0; i < reply.elements; ++i) {
    const redisReply* range = reply.element[i];
    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
        range->element[2]->type != REDIS_REPLY_ARRAY || range->element[2]->elements < 2) {
      continue;
    }
    const redisReply* master = range->element[2];
    RedisEndpoint endpoint{
        .host = master->element[0]->str != nullptr ? master->element[0]->str : "",
        .port = static_cast<uint16_t>(master->element[1]->integer)};
    if (endpoint.host.empty() || endpoint.host == "?") {
      endpoint.host = asked.host;  // The node does not know its own address: the one we used.
    }
    const long long first = std::clamp<long long>(range->element[0]->integer, 0, kSlotCount - 1);
    const long long last = std::clamp<long long>(range->element[1]->integer, 0, kSlotCount - 1);
    ranges.push_back({.first = static_cast<int>(first),
                      .last = static_cast<int>(last),
                      .master = std::move(endpoint)});
  }
  return ranges;
}

}  // namespace internal

namespace {

namespace asio = boost::asio;
using internal::ReadClusterSlots;
using internal::Redirection;
using internal::SlotRange;

// A call that keeps being redirected is given up; TRYAGAIN (keys split by a migration) and a
// call's second and later redirections are followed after a pause; the slot map is asked for
// at most this often.
constexpr int kMaxRedirects = 5;
constexpr auto kTryAgainPause = std::chrono::milliseconds(10);
constexpr auto kSlotsInterval = std::chrono::milliseconds(100);

}  // namespace

// Asks a ready connection for the cluster's slot map: one question at a time, and at most
// one per kSlotsInterval (a later wish is granted when the interval is up).
void RedisStore::Impl::RefreshSlots() {
  if (!options_.cluster || slots_asked_ || slots_timer_armed_ || stopping_) {
    return;
  }
  const SteadyTime now = SteadyClock::now();
  if (now < slots_asked_at_ + kSlotsInterval) {
    slots_timer_armed_ = true;
    slots_timer_.expires_at(slots_asked_at_ + kSlotsInterval);
    slots_timer_.async_wait([this](boost::system::error_code ec) {
      slots_timer_armed_ = false;
      if (!ec) {
        RefreshSlots();
      }
    });
    return;
  }
  for (auto& node : nodes_) {
    for (auto& c : node->connections) {
      if (c->ready()) {
        slots_asked_ = true;
        slots_asked_at_ = now;
        c->AskSlots();
        return;
      }
    }
  }
}

// The answer to CLUSTER SLOTS: a fresh map, and every queued call routed by it.
void RedisStore::Impl::OnSlots(const redisReply& reply, const RedisEndpoint& asked) {
  slots_asked_ = false;
  const std::optional<std::vector<SlotRange>> ranges = ReadClusterSlots(reply, asked);
  if (!ranges) {
    return;
  }
  slots_known_ = true;
  std::fill(slot_owner_.begin(), slot_owner_.end(), nullptr);
  for (const SlotRange& range : *ranges) {
    Node* owner = &NodeAt(range.master);
    for (int slot = range.first; slot <= range.last; ++slot) {
      slot_owner_[static_cast<size_t>(slot)] = owner;
    }
  }
  // A node that refused to decide (READONLY, CLUSTERDOWN while a failover went on) and that
  // the map no longer makes a master of will never answer a decision that would show it well
  // again: it no longer counts against the store's health.
  for (const auto& node : nodes_) {
    const std::string name = RedisEndpointName(node->endpoint);
    if (health_.refusing(name) &&
        std::find(slot_owner_.begin(), slot_owner_.end(), node.get()) == slot_owner_.end()) {
      health_.Moved(name, fmt::format("Redis at {} serves no slot now (a failover): what it "
                                      "refused no longer counts against the store",
                                      name));
    }
  }
  // Calls queued by the old map go where the new one says.
  std::deque<CallPtr> all;
  all.swap(unrouted_);
  for (auto& node : nodes_) {
    for (CallPtr& c : node->queue) {
      all.push_back(std::move(c));
    }
    node->queue.clear();
  }
  for (CallPtr& c : all) {
    Route(std::move(c));
  }
  // A slot the fresh map gives no node: nothing can decide it now.
  std::deque<CallPtr> unserved;
  unserved.swap(unrouted_);
  for (CallPtr& c : unserved) {
    Complete(*c, absl::UnavailableError(
                     fmt::format("no node of the Redis Cluster serves slot {}", c->slot)));
  }
}

// CLUSTER SLOTS refused (a server without cluster support): what waits for the map fails.
void RedisStore::Impl::OnSlotsRefused(std::string_view error) {
  slots_asked_ = false;
  last_error_ = fmt::format("Redis refused CLUSTER SLOTS: {}", error);
  FailAll(unrouted_, absl::UnavailableError(last_error_));
}

// A batch's calls were redirected (MOVED: the slot has a new owner; ASK: one call's worth
// while it migrates; TRYAGAIN: keys split mid-migration) or a batch failed as a whole.
void RedisStore::Impl::Redirect(Pending batch, std::string_view error) {
  redirects_.fetch_add(1, std::memory_order_relaxed);
  bool given_up = false;
  bool again = false;  // A call already redirected before.
  for (CallPtr& c : batch.calls) {
    again = c->redirects > 0 || again;
    given_up = ++c->redirects > kMaxRedirects || given_up;
  }
  if (given_up) {
    FailAll(batch.calls, absl::UnavailableError(fmt::format(
                             "redis: still redirected after {} tries: {}", kMaxRedirects, error)));
    return;
  }
  const std::optional<std::pair<int, RedisEndpoint>> to = Redirection(error);
  if (error.starts_with("MOVED") && to) {
    slot_owner_[static_cast<size_t>(to->first)] = &NodeAt(to->second);
    RefreshSlots();  // Other slots may have moved too.
  } else if (error.starts_with("ASK") && to) {
    asks_.fetch_add(1, std::memory_order_relaxed);
    NodeAt(to->second).asked.push_back(std::move(batch));
    return;
  }
  if (again || !error.starts_with("MOVED") || !to) {
    // TRYAGAIN: the keys are split between two nodes for a moment. A second redirection:
    // the nodes disagree for a moment while a slot's new owner is announced to each in turn
    // (a MOVED from the old owner to a new one that still sends it back). Either way, ask
    // again shortly rather than spend every try within a millisecond.
    auto timer = std::make_shared<asio::steady_timer>(io_, kTryAgainPause);
    auto calls = std::make_shared<std::vector<CallPtr>>(std::move(batch.calls));
    timer->async_wait([this, timer, calls](boost::system::error_code) {
      for (CallPtr& c : *calls) {
        if (stopping_) {
          Complete(*c, absl::CancelledError("the Redis store is shutting down"));
        } else {
          Route(std::move(c));
        }
      }
      Dispatch();
    });
    return;
  }
  for (CallPtr& c : batch.calls) {
    Route(std::move(c));
  }
}

}  // namespace sluice
