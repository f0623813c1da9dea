#include "src/redis/shares.h"

#include <algorithm>
#include <functional>

#include "absl/strings/string_view.h"

#include "sluice/algorithms.h"

namespace sluice::internal {
namespace {

// How long Redis's answer says the window it charged goes on, for the windowed algorithms
// (a charge leaves its key holding units, so reset_after ends with the window, or the window
// after it for sliding_window); nullopt for the others.
std::optional<Micros> WindowLeft(const Limit& limit, const Decision& answer) {
  switch (limit.algorithm()) {
    case Algorithm::kFixedWindow:
      return answer.reset_after;
    case Algorithm::kSlidingWindow:
      return std::max(Micros{0}, answer.reset_after - limit.period());
    default:
      return std::nullopt;
  }
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  return a > Limit::kMaxCount - b ? Limit::kMaxCount : a + b;
}

}  // namespace

Shares::Shares(size_t capacity) : per_shard_(std::max<size_t>(1, capacity / kShards)) {}

Shares::Shard& Shares::ShardOf(std::string_view id) {
  return shards_[std::hash<std::string_view>{}(id) % kShards];
}

Shares::Plan Shares::Begin(const ShareKey& k, int64_t cost, Timestamp now,
                           std::vector<ShareReturn>& returns, absl::FunctionRef<Waiter()> wait) {
  Shard& s = ShardOf(k.id);
  SpinLockHolder lock(s.mu);
  Entry& e = Find(s, k, now, returns);
  e.policy = k.policy;  // A reload may have changed it.
  Retire(s, e, now, Which::kEnded, returns);
  if (now >= e.rate_start + e.policy.ttl) {
    e.rate_last = now < e.rate_start + 2 * e.policy.ttl ? e.rate_units : 0;
    e.rate_start = now;
    e.rate_units = 0;
  }
  e.rate_units = SaturatingAdd(e.rate_units, cost);

  Plan plan;
  for (Tranche& t : e.tranches) {
    // A request whose time is before the share's call is not answered by it: the share's
    // units belong to the window of a later time.
    if (t.left >= cost && now >= t.sent) {
      plan.local = Use(e, t, cost, now);
      break;
    }
  }
  if (!plan.local) {
    // While a share is on its way, others wait for it, or ask at their own cost rather than
    // take another.
    if (e.taking && e.waiting.size() < kMaxWaiting) {
      if (Waiter waiter = wait()) {
        e.waiting.push_back({.cost = cost, .now = now, .waiter = std::move(waiter)});
        plan.waiting = true;
        return plan;
      }
    }
    plan.take = e.taking ? cost : Want(e, cost, now);
    e.taking = e.taking || plan.take > cost;
    return plan;
  }
  local_.fetch_add(1, std::memory_order_relaxed);
  if (e.tranches.front().left == 0) {
    e.tranches.erase(e.tranches.begin());
    Reindex(s, e);
  }
  int64_t held = 0;
  for (const Tranche& t : e.tranches) {
    held += t.left;
  }
  // Refill ahead, when half the share the rate wants is used, so that a hot key rarely finds
  // its share empty and waits for Redis.
  if (const int64_t want = Want(e, 0, now); !e.taking && want >= 2 && held * 2 < want) {
    plan.refill = want;
    e.taking = true;
  }
  return plan;
}

std::optional<Decision> Shares::Taken(const ShareKey& k, int64_t cost, int64_t take, Timestamp sent,
                                      const Decision& answer, const std::optional<Charge>& receipt,
                                      std::vector<ShareReturn>& returns,
                                      std::vector<Ready>* ready) {
  Shard& s = ShardOf(k.id);
  SpinLockHolder lock(s.mu);
  Entry& e = Find(s, k, sent, returns);
  const bool share = take > cost;
  if (share) {
    e.taking = false;
  }
  Learn(e, answer, sent);
  std::optional<Decision> d = Record(s, e, cost, take, sent, answer, receipt);
  if (share) {
    Release(e, ready);
  }
  return d;
}

std::optional<Decision> Shares::Record(Shard& s, Entry& e, int64_t cost, int64_t take,
                                       Timestamp sent, const Decision& answer,
                                       const std::optional<Charge>& receipt) {
  const bool share = take > cost;
  if (!share || !answer.allowed) {
    if (share) {
      denied_.fetch_add(1, std::memory_order_relaxed);
      if (cost > 0) {
        return std::nullopt;
      }
    }
    return answer;
  }
  Tranche t{.taken = take, .left = take - cost, .sent = sent, .answer = answer, .receipt = receipt};
  Micros life = e.policy.ttl;
  if (const std::optional<Micros> window = WindowLeft(e.limit, answer); window && *window < life) {
    life = *window;
    t.window_ends = true;
  }
  t.ends = sent + life;
  if (life <= Micros{0}) {
    units_lapsed_.fetch_add(static_cast<uint64_t>(t.left), std::memory_order_relaxed);
    return answer;
  }
  taken_.fetch_add(1, std::memory_order_relaxed);
  e.tranches.push_back(t);
  Reindex(s, e);
  // The request's figures: Redis's, with what this server now holds counted as remaining.
  Decision d = answer;
  d.remaining = SaturatingAdd(std::max<int64_t>(0, d.remaining), t.left);
  return d;
}

void Shares::Failed(const ShareKey& k, int64_t cost, int64_t take, std::vector<Ready>* ready) {
  Shard& s = ShardOf(k.id);
  SpinLockHolder lock(s.mu);
  if (auto it = s.entries.find(absl::string_view(k.id.data(), k.id.size()));
      it != s.entries.end() && take > cost) {
    it->second.taking = false;
    Release(it->second, ready);
  }
}

void Shares::Release(Entry& e, std::vector<Ready>* ready) {
  for (Entry::Waiting& w : e.waiting) {
    std::optional<Decision> d;
    for (Tranche& t : e.tranches) {
      if (t.left >= w.cost && w.now >= t.sent && w.now < t.ends) {
        d = Use(e, t, w.cost, w.now);
        local_.fetch_add(1, std::memory_order_relaxed);
        break;
      }
    }
    if (ready != nullptr) {
      ready->push_back({.waiter = std::move(w.waiter), .decision = d});
    }
  }
  e.waiting.clear();
}

void Shares::Expire(Timestamp now, std::vector<ShareReturn>& returns) {
  for (Shard& s : shards_) {
    SpinLockHolder lock(s.mu);
    while (!s.ending.empty() && s.ending.begin()->first <= now) {
      Retire(s, *s.ending.begin()->second, now, Which::kTtl, returns);
    }
  }
}

void Shares::Drain(Timestamp now, std::vector<ShareReturn>& returns) {
  for (Shard& s : shards_) {
    SpinLockHolder lock(s.mu);
    for (auto& [id, e] : s.entries) {
      Retire(s, e, now, Which::kAll, returns);
    }
  }
}

ShareStats Shares::Stats() const {
  return {.local = local_.load(std::memory_order_relaxed),
          .taken = taken_.load(std::memory_order_relaxed),
          .denied = denied_.load(std::memory_order_relaxed),
          .units_returned = units_returned_.load(std::memory_order_relaxed),
          .units_lapsed = units_lapsed_.load(std::memory_order_relaxed),
          .entries = static_cast<uint64_t>(entries_.load(std::memory_order_relaxed))};
}

Shares::Entry& Shares::Find(Shard& s, const ShareKey& k, Timestamp now,
                            std::vector<ShareReturn>& returns) {
  if (auto it = s.entries.find(absl::string_view(k.id.data(), k.id.size()));
      it != s.entries.end()) {
    Entry& e = it->second;
    s.lru.splice(s.lru.begin(), s.lru, e.lru);
    return e;
  }
  if (s.entries.size() >= per_shard_) {
    // The least recently used entry without a share on its way (whose answer, and the
    // requests waiting for it, the entry must still see); a few are looked at.
    auto victim = s.lru.end();
    int looked = 0;
    for (auto it = s.lru.end(); it != s.lru.begin() && looked < 8; ++looked) {
      --it;
      if (!(*it)->taking) {
        victim = it;
        break;
      }
    }
    if (victim != s.lru.end()) {
      Entry& v = **victim;
      Retire(s, v, now, Which::kAll, returns);
      s.lru.erase(victim);
      s.entries.erase(s.entries.find(*v.id));
      entries_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  auto [it, inserted] = s.entries.try_emplace(
      std::string(k.id),
      Entry{.limit = k.limit, .key = std::string(k.key), .policy = k.policy, .rate_start = {}});
  Entry& e = it->second;
  e.id = &it->first;
  s.lru.push_front(&e);
  e.lru = s.lru.begin();
  entries_.fetch_add(1, std::memory_order_relaxed);
  return e;
}

void Shares::Retire(Shard& s, Entry& e, Timestamp now, Which which,
                    std::vector<ShareReturn>& returns) {
  bool changed = false;
  for (auto t = e.tranches.begin(); t != e.tranches.end();) {
    const bool retire =
        which == Which::kAll || (now >= t->ends && (which == Which::kEnded || !t->window_ends));
    if (!retire) {
      ++t;
      continue;
    }
    if (t->left > 0 && t->window_ends && now >= t->ends) {
      // Its window is over: the units were Redis's in a window that no longer counts.
      units_lapsed_.fetch_add(static_cast<uint64_t>(t->left), std::memory_order_relaxed);
    } else if (t->left > 0) {
      units_returned_.fetch_add(static_cast<uint64_t>(t->left), std::memory_order_relaxed);
      ShareReturn& r = returns.emplace_back(ShareReturn{
          .limit = e.limit, .key = e.key, .units = t->left, .taken = t->taken, .sent = t->sent});
      if (t->receipt) {
        r.receipt = *t->receipt;
        r.receipt->units = t->left;
      }
    }
    t = e.tranches.erase(t);
    changed = true;
  }
  if (changed) {
    Reindex(s, e);
  }
}

void Shares::Reindex(Shard& s, Entry& e) {
  if (e.indexed) {
    s.ending.erase({*e.indexed, &e});
    e.indexed.reset();
    holding_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (e.tranches.empty()) {
    return;
  }
  std::optional<Timestamp> first;
  for (const Tranche& t : e.tranches) {
    if (!t.window_ends && (!first || t.ends < *first)) {
      first = t.ends;
    }
  }
  if (first) {
    holding_.fetch_add(1, std::memory_order_relaxed);
    e.indexed = first;
    s.ending.insert({*first, &e});
  }
}

int64_t Shares::Want(const Entry& e, int64_t cost, Timestamp now) {
  if (e.remaining < 0 || now >= e.remaining_until) {
    return cost;  // Ask exactly first: Redis's answer says what remains.
  }
  const int64_t demand = std::max(e.rate_last, e.rate_units);
  const int64_t cap = std::max(cost, std::min(e.policy.max, e.limit.burst()));
  const int64_t want = std::clamp(demand, cost, cap);
  return cost + std::max<int64_t>(0, std::min(want - cost, e.remaining / kFraction));
}

Decision Shares::Use(const Entry& e, Tranche& t, int64_t cost, Timestamp now) {
  const int64_t first = t.taken - t.left;  // The index of the first unit this request uses.
  t.left -= cost;
  int64_t held = 0;
  for (const Tranche& u : e.tranches) {
    held += u.left;
  }
  Decision d{.allowed = true,
             .remaining = SaturatingAdd(held, std::max<int64_t>(0, e.remaining)),
             .reset_after = std::max(Micros{0}, t.answer.reset_after - (now - t.sent))};
  if (e.limit.algorithm() == Algorithm::kLeakyBucket) {
    // The share's units drain one after another from the first's time, N per P.
    const Int128 offset = (Int128{first} * e.limit.rate_period_us() + e.limit.rate_units() - 1) /
                          e.limit.rate_units();
    const Int128 due = (t.sent + t.answer.delay).time_since_epoch().count() + offset;
    const Int128 wait = due - now.time_since_epoch().count();
    d.delay = Micros{static_cast<int64_t>(std::max<Int128>(0, wait))};
  }
  return d;
}

void Shares::Learn(Entry& e, const Decision& answer, Timestamp sent) {
  Micros stands = e.policy.ttl;
  if (answer.allowed) {
    if (const std::optional<Micros> window = WindowLeft(e.limit, answer)) {
      stands = std::min(stands, *window);
    }
  } else if (answer.retry_after > Micros{0}) {
    stands = std::min(stands, answer.retry_after);
  }
  e.remaining = answer.remaining;
  e.remaining_until = sent + stands;
}

}  // namespace sluice::internal
