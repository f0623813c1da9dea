// MemcachedStore's settles and resets (Store::ChargeAllAsync is in memcached_store.cc, beside
// the decisions it shares everything with): the `once` claim, each limit's settle in its own
// gets/cas loop, the failure policy's part, and the deletes of a reset.
//
// Why the claim is an `add` of its own, made first: a settle must change nothing when its
// `once` is claimed already, fleet-wide, and Memcached's `add` is the one write that fails when
// another server made it first. Every limit's item is then read before any is written, so that
// a failure up to there changes nothing and the claim can be taken back; after it, Memcached
// has no transaction to undo what was written, so a limit that fails keeps its units charged
// and the claim stays (a replay would give back the others twice: more admitted).

#include <algorithm>
#include <memory>
#include <utility>

#include "fmt/format.h"

#include "sluice/memcached_store.h"
#include "src/memcached/item.h"
#include "src/memcached/keys.h"
#include "src/memcached/store_impl.h"
#include "src/memory/compact_state.h"

namespace sluice {
namespace {

// The debts an item can hold: its state must decode (Plausible bounds a key's debt by the
// memory store's MaxDebt, whose encoding the items share).
absl::Status CheckDebts(std::span<const LimitedKey> requests,
                        std::span<const Settlement> settlements) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const Limit& limit = *requests[i].limit;
    if (const int64_t most = internal::MaxDebt(limit); settlements[i].max_debt > most) {
      return absl::InvalidArgumentError(
          fmt::format("max_debt {} is above the {} the memcached store holds for {}",
                      settlements[i].max_debt, most, limit.ToString()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

Settled MemcachedStore::Impl::SettleFailed(const LimitedKey& request, const Settlement& settlement,
                                           Timestamp now, const absl::Status& error) {
  const int64_t extra = settlement.units - settlement.charge.units;
  if (extra <= 0) {
    return {};  // Nothing given back: the units stay charged, which admits less.
  }
  Settled local;
  if (internal::IsMemcachedUnavailable(error) && options_.on_failure == FailurePolicy::kLocal) {
    // Charged where the policy decides while Memcached is away: nothing there to give back.
    const Settlement charge{.units = extra, .max_debt = settlement.max_debt};
    if (!local_.SettleAll({&request, 1}, {&charge, 1}, "", now, now, {&local, 1}).ok()) {
      local = {};
    }
  }
  settle_units_lost_.fetch_add(static_cast<uint64_t>(extra - local.charged),
                               std::memory_order_relaxed);
  return local;
}

absl::Status MemcachedStore::Impl::Settle(MemcachedConnection& connection,
                                          std::span<const LimitedKey> requests,
                                          std::span<const Settlement> settlements,
                                          std::string_view once, Timestamp once_until,
                                          Timestamp now, std::span<Settled> settled,
                                          SteadyTime deadline) {
  std::fill(settled.begin(), settled.end(), Settled{});
  absl::InlinedVector<ItemTarget, 4> targets;
  if (absl::Status s = internal::CheckTargets(options_.key_prefix, requests, 0, now, targets);
      !s.ok()) {
    return s;
  }
  calls_.fetch_add(1, std::memory_order_relaxed);
  // Fails every limit from `from` on with `error` (the failure policy's part), and answers it.
  auto fail = [&](size_t from, absl::Status error) {
    failures_.fetch_add(internal::IsMemcachedUnavailable(error) ? 1 : 0, std::memory_order_relaxed);
    for (size_t i = from; i < requests.size(); ++i) {
      settled[i] = SettleFailed(requests[i], settlements[i], now, error);
    }
    return error;
  };
  if (SteadyClock::now() >= deadline) {  // It waited its whole timeout in the queue.
    return fail(0, absl::DeadlineExceededError(fmt::format(
                       "memcached: the settle waited past its timeout ({} ms) for a thread of "
                       "the store",
                       options_.timeout.count())));
  }
  const std::string once_key = internal::OnceKey(options_.key_prefix, once);
  const std::optional<int64_t> exptime =
      once.empty() ? std::nullopt : internal::OnceExptime(once_until, now, options_.expiry_margin);
  if (exptime) {
    absl::StatusOr<bool> added = connection.Add(once_key, "1", *exptime);
    if (!added.ok()) {
      return fail(0, added.status());
    }
    if (!*added) {
      return absl::AlreadyExistsError("receipt was settled already");
    }
  }
  absl::InlinedVector<internal::ReadItem, 4> reads;
  for (const ItemTarget& target : targets) {
    absl::StatusOr<internal::ReadItem> read = internal::ReadState(connection, target);
    if (!read.ok()) {
      if (exptime) {
        // Nothing written yet: the settle may be tried again. A claim that cannot be taken
        // back refuses that retry (its units stay charged: fewer admitted, never more).
        connection.Delete(once_key).IgnoreError();
      }
      return fail(0, read.status());
    }
    reads.push_back(*std::move(read));
  }
  internal::CasSettings settings = settings_;
  settings.deadline = deadline;
  absl::Status first_error;
  for (size_t i = 0; i < targets.size(); ++i) {
    absl::StatusOr<Settled> done = internal::SettleState(connection, targets[i], settlements[i],
                                                         now, std::move(reads[i]), settings);
    if (done.ok()) {
      settled[i] = *done;
      continue;
    }
    // The others are settled still: each limit's own units, each in a loop of its own.
    if (first_error.ok()) {
      failures_.fetch_add(internal::IsMemcachedUnavailable(done.status()) ? 1 : 0,
                          std::memory_order_relaxed);
      first_error = done.status();
    }
    settled[i] = SettleFailed(requests[i], settlements[i], now, done.status());
  }
  return first_error;
}

absl::Status MemcachedStore::Impl::Reset(MemcachedConnection& connection,
                                         std::span<const LimitedKey> requests, Timestamp now) {
  absl::InlinedVector<ItemTarget, 4> targets;
  if (absl::Status s = internal::CheckTargets(options_.key_prefix, requests, 0, now, targets);
      !s.ok()) {
    return s;
  }
  if (options_.on_failure == FailurePolicy::kLocal) {
    // What an outage decided here is forgotten too.
    local_.ResetAll(requests, now).IgnoreError();
  }
  calls_.fetch_add(1, std::memory_order_relaxed);
  absl::Status first_error;
  for (const ItemTarget& target : targets) {
    // The earlier items first: else a decision between the two deletes could move one of them
    // back under the new figures, undoing the reset.
    internal::ForgetEarlier(connection, target);
    if (absl::Status s = connection.Delete(target.item_key); !s.ok() && first_error.ok()) {
      failures_.fetch_add(1, std::memory_order_relaxed);
      first_error = s;
    }
  }
  return first_error;
}

void MemcachedStore::SettleAllAsync(std::span<const LimitedKey> requests,
                                    std::span<const Settlement> settlements, std::string_view once,
                                    Timestamp once_until, Timestamp now, std::span<Settled> settled,
                                    StatusDone done) {
  if (absl::Status s = ValidateSettleAll(requests.size(), settlements, once, settled.size());
      !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  if (absl::Status s = CheckDebts(requests, settlements); !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  auto shared_done = std::make_shared<StatusDone>(std::move(done));
  const Impl::SteadyTime deadline = Impl::SteadyClock::now() + impl_->options().timeout;
  const bool queued = impl_->workers().Post(
      [impl = impl_.get(), owned = internal::OwnedRequests(requests),
       wanted = std::vector<Settlement>(settlements.begin(), settlements.end()),
       once = std::string(once), once_until, now, settled, deadline,
       shared_done](MemcachedConnection& connection) mutable {
        std::move (*shared_done)(impl->Settle(connection, owned.View(), wanted, once, once_until,
                                              now, settled, deadline));
      });
  if (!queued) {
    const absl::Status busy = absl::UnavailableError(fmt::format(
        "memcached: {} calls wait for the store's threads already: the settle was not made",
        internal::Workers::kMaxQueued));
    for (size_t i = 0; i < requests.size(); ++i) {
      settled[i] = impl_->SettleFailed(requests[i], settlements[i], now, busy);
    }
    std::move (*shared_done)(busy);
  }
}

void MemcachedStore::ResetAllAsync(std::span<const LimitedKey> requests, Timestamp now,
                                   StatusDone done) {
  auto shared_done = std::make_shared<StatusDone>(std::move(done));
  const bool queued =
      impl_->workers().Post([impl = impl_.get(), owned = internal::OwnedRequests(requests), now,
                             shared_done](MemcachedConnection& connection) mutable {
        std::move (*shared_done)(impl->Reset(connection, owned.View(), now));
      });
  if (!queued) {
    std::move (*shared_done)(absl::UnavailableError(
        fmt::format("memcached: {} calls wait for the store's threads already: the reset was "
                    "not made",
                    internal::Workers::kMaxQueued)));
  }
}

}  // namespace sluice
