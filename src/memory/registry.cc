#include "src/memory/registry.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "fmt/format.h"

namespace sluice::internal {
namespace {

std::atomic<uint64_t> next_registry_id{1};

// A table is not retired before this long after it was made (or a period, if longer): the
// request that made it has time to use it, even when it is idle at once.
constexpr Micros kMinTableAge = std::chrono::seconds(1);

}  // namespace

Registry::Registry(size_t max_tables, Budget& budget, const Fingerprint* compact_keys)
    : max_tables_(max_tables),
      budget_(budget),
      compact_keys_(compact_keys),
      id_(next_registry_id.fetch_add(1)) {
  MutexLock lock(mu_);
  Publish({});
}

namespace {

// Keeps alive the View this thread's PinnedView points to.
thread_local std::shared_ptr<const Registry::View> held;

}  // namespace

const Registry::View& Registry::Refresh() {
  std::shared_ptr<const View> old;  // Let go of after the lock: it may free tables.
  {
    MutexLock lock(mu_);
    old = std::exchange(held, view_);
    pinned = {
        .registry = id_, .version = version_.load(std::memory_order_relaxed), .view = held.get()};
  }
  return *pinned.view;
}

std::shared_ptr<const Registry::View> Registry::Current() const {
  MutexLock lock(mu_);
  return view_;
}

void Registry::Publish(std::vector<std::shared_ptr<Table>> owned) {
  auto view = std::make_shared<View>();
  size_t slots = 8;
  while (slots < 2 * owned.size()) {
    slots *= 2;
  }
  view->slots.assign(slots, nullptr);
  for (const std::shared_ptr<Table>& table : owned) {
    view->tables.push_back(table.get());
    for (size_t i = SlotOf(table->limit()) & (slots - 1);; i = (i + 1) & (slots - 1)) {
      if (view->slots[i] == nullptr) {
        view->slots[i] = table.get();
        break;
      }
    }
  }
  view->owned = std::move(owned);
  size_.store(view->owned.size(), std::memory_order_relaxed);
  view_ = std::move(view);
  // Release: a thread that sees the new version pins a View that is fully built.
  version_.fetch_add(1, std::memory_order_release);
}

size_t Registry::RetireIdle(Timestamp now, size_t look, size_t want) {
  // Held for the walk: a table retired below stays alive until RetireIfEmpty has let go.
  const std::shared_ptr<const View> walking = view_;
  const std::vector<std::shared_ptr<Table>>& all = walking->owned;
  size_t done = 0;
  size_t k = 0;
  const size_t start = all.empty() ? 0 : cursor_ % all.size();
  for (; k < std::min(look, all.size()) && done < want; ++k) {
    Table* const table = all[(start + k) % all.size()].get();
    const Micros age = std::max(table->limit().period(), kMinTableAge);
    if (table->retired() || now - table->created() < age || !table->DropReset(now)) {
      continue;
    }
    // Empty now: retire it, unless a key came meanwhile. Taken out of the View in force (not
    // `walking`, which earlier retirements have replaced) under its shard locks.
    const bool gone = table->RetireIfEmpty([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      std::vector<std::shared_ptr<Table>> kept;
      kept.reserve(view_->owned.size());
      for (const std::shared_ptr<Table>& t : view_->owned) {
        if (t.get() != table) {
          kept.push_back(t);
        }
      }
      Publish(std::move(kept));
    });
    if (gone) {
      ++done;
      retired_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // Less those retired before it: the walk goes on from the next table it has not seen.
  cursor_ = all.empty() ? 0 : (start + k - done) % all.size();
  return done;
}

absl::Status Registry::Insert(const Limit& limit, Timestamp now) {
  MutexLock lock(mu_);
  if (view_->Find(limit) != nullptr) {
    return absl::OkStatus();  // Another thread made it first.
  }
  RetireIdle(now, kRetirePerInsert, kRetirePerInsert);
  if (view_->owned.size() >= max_tables_ && RetireIdle(now, view_->owned.size(), 1) == 0) {
    return absl::ResourceExhaustedError(fmt::format(
        "the memory store holds {} distinct limits, each with keys that have not reset; "
        "refusing {} (idle limits are freed once their keys reset)",
        max_tables_, limit.ToString()));
  }
  std::vector<std::shared_ptr<Table>> owned = view_->owned;
  owned.push_back(MakeTable(limit, budget_, now, compact_keys_));
  Publish(std::move(owned));
  return absl::OkStatus();
}

}  // namespace sluice::internal
