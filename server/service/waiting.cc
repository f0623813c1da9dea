#include "server/service/waiting.h"

#include <algorithm>
#include <atomic>
#include <list>
#include <unordered_map>
#include <utility>

#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/system_timer.hpp"

#include "src/core/mutex.h"

namespace sluice::server {

namespace asio = boost::asio;
using internal::MutexLock;

struct AsioTimers::State {
  asio::io_context context{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{context.get_executor()};
  std::atomic<Id> next_id{1};
  // Timers waiting, by id. Touched on the context's thread only.
  std::unordered_map<Id, std::shared_ptr<asio::system_timer>> waiting;
  std::atomic<size_t> pending{0};  // At calls not yet run or cancelled.
};

AsioTimers::AsioTimers()
    : state_(std::make_unique<State>()),
      thread_([state = state_.get()] { state->context.run(); }) {}

AsioTimers::~AsioTimers() {
  state_->context.stop();
  thread_.join();
}

Timers::Id AsioTimers::At(Timestamp when, absl::AnyInvocable<void() &&> fn) {
  const Id id = state_->next_id.fetch_add(1, std::memory_order_relaxed);
  state_->pending.fetch_add(1, std::memory_order_relaxed);
  asio::post(state_->context, [state = state_.get(), id, when, fn = std::move(fn)]() mutable {
    // Compared in microseconds: a time long past (Timestamp::min()) has no nanosecond form.
    if (when <= std::chrono::time_point_cast<Micros>(std::chrono::system_clock::now())) {
      state->pending.fetch_sub(1, std::memory_order_relaxed);
      std::move(fn)();
      return;
    }
    auto timer = std::make_shared<asio::system_timer>(state->context);
    timer->expires_at(when);
    state->waiting.emplace(id, timer);
    timer->async_wait([state, id, fn = std::move(fn)](const boost::system::error_code& ec) mutable {
      if (!ec && state->waiting.erase(id) > 0) {
        state->pending.fetch_sub(1, std::memory_order_relaxed);
        std::move(fn)();
      }
    });
  });
  return id;
}

void AsioTimers::Cancel(Id id) {
  if (id == 0) {
    return;
  }
  // Runs after At's own post (one thread runs the context, in order): the timer is in
  // `waiting` by then, unless it has run.
  asio::post(state_->context, [state = state_.get(), id] {
    const auto it = state->waiting.find(id);
    if (it == state->waiting.end()) {
      return;
    }
    // Its handler then runs with operation_aborted and drops `fn` (and what it holds).
    it->second->cancel();
    state->waiting.erase(it);
    state->pending.fetch_sub(1, std::memory_order_relaxed);
  });
}

size_t AsioTimers::pending() const { return state_->pending.load(std::memory_order_relaxed); }

struct WaitLines::State : std::enable_shared_from_this<State> {
  explicit State(Timers& t) : timers(t) {}

  // Parks w's coroutine until `until`, unless woken before (a later sleep, a cancellation or
  // the head of the line make this timer stale).
  void ParkUntilLocked(const std::shared_ptr<Waiter>& waiter, std::coroutine_handle<> handle,
                       Timestamp until) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex);

  // Makes w's current sleep stale: its timer, if it has not run, is cancelled and would wake
  // nobody anyway.
  void EndSleepLocked(Waiter& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    ++w.sleep;
    timers.Cancel(std::exchange(w.timer, 0));
  }

  // Schedules w's resumption if it is parked. Through the timers, never inline: the caller
  // may be a coroutine that would otherwise run the next one on its own stack.
  void WakeLocked(Waiter& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    if (w.parked) {
      timers.At(Timestamp::min(), [handle = std::exchange(w.parked, {})] { handle.resume(); });
    }
  }

  Timers& timers;
  mutable internal::Mutex mutex;
  std::unordered_map<std::string, std::list<std::shared_ptr<Waiter>>> lines ABSL_GUARDED_BY(mutex);
  size_t waiting ABSL_GUARDED_BY(mutex) = 0;
  absl::Status stopped ABSL_GUARDED_BY(mutex);  // CancelAll's reason, for every later waiter too.
};

WaitLines::WaitLines(Timers& timers) : state_(std::make_shared<State>(timers)) {}
WaitLines::~WaitLines() = default;

bool WaitLines::Park::await_suspend(std::coroutine_handle<> handle) {
  MutexLock lock(state_->mutex);
  if (!state_->stopped.ok() && waiter_->cancelled.ok()) {
    waiter_->cancelled = state_->stopped;  // Arrived after CancelAll: goes no further.
  }
  if (join_) {
    std::list<std::shared_ptr<Waiter>>& line = state_->lines[waiter_->line];
    line.push_back(waiter_);
    waiter_->in_line = true;
    ++state_->waiting;
    if (line.size() == 1) {
      waiter_->head = true;
      return false;
    }
  }
  if (!waiter_->cancelled.ok()) {
    return false;
  }
  if (wake_on_ && std::exchange(waiter_->notified, false)) {
    return false;  // A slot it watches came back while it asked: it asks again now.
  }
  waiter_->wake_on = wake_on_ ? *std::move(wake_on_) : std::vector<std::string>();
  state_->ParkUntilLocked(waiter_, handle, until_);
  return true;
}

void WaitLines::State::ParkUntilLocked(const std::shared_ptr<Waiter>& waiter,
                                       std::coroutine_handle<> handle, Timestamp until) {
  waiter->parked = handle;
  const uint64_t sleep = ++waiter->sleep;
  waiter->timer = timers.At(until, [weak = weak_from_this(), waiter, sleep] {
    const std::shared_ptr<State> state = weak.lock();
    if (!state) {
      return;
    }
    std::coroutine_handle<> parked;
    {
      MutexLock lock(state->mutex);
      if (waiter->sleep == sleep) {  // Not a sleep that a cancellation already ended.
        parked = std::exchange(waiter->parked, {});
        waiter->timer = 0;
      }
    }
    if (parked) {
      parked.resume();  // On the timers' thread, with nothing of ours on the stack.
    }
  });
}

void WaitLines::Leave(const std::shared_ptr<Waiter>& waiter) {
  MutexLock lock(state_->mutex);
  if (!waiter->in_line) {
    return;
  }
  const auto it = state_->lines.find(waiter->line);
  std::list<std::shared_ptr<Waiter>>& line = it->second;
  line.erase(std::find(line.begin(), line.end(), waiter));
  waiter->in_line = false;
  --state_->waiting;
  const bool was_head = std::exchange(waiter->head, false);
  if (line.empty()) {
    state_->lines.erase(it);
  } else if (was_head) {
    Waiter& next = *line.front();
    next.head = true;
    state_->EndSleepLocked(next);  // Its timer (the end of its max_wait) is stale now.
    state_->WakeLocked(next);
  }
}

void WaitLines::Cancel(const std::shared_ptr<Waiter>& waiter, absl::Status why) {
  MutexLock lock(state_->mutex);
  if (waiter->cancelled.ok()) {
    waiter->cancelled = std::move(why);
  }
  state_->EndSleepLocked(*waiter);  // A timer still to fire is stale now.
  state_->WakeLocked(*waiter);
}

void WaitLines::CancelAll(absl::Status why) {
  MutexLock lock(state_->mutex);
  state_->stopped = why;
  for (auto& [key, line] : state_->lines) {
    for (const std::shared_ptr<Waiter>& waiter : line) {
      if (waiter->cancelled.ok()) {
        waiter->cancelled = why;
      }
      state_->EndSleepLocked(*waiter);
      state_->WakeLocked(*waiter);
    }
  }
}

void WaitLines::Watch(const std::shared_ptr<Waiter>& waiter, std::vector<std::string> keys) {
  MutexLock lock(state_->mutex);
  waiter->wake_on = std::move(keys);
  waiter->notified = false;
}

void WaitLines::Notify(std::span<const LeasedKey> keys) {
  MutexLock lock(state_->mutex);
  for (auto& [line_key, line] : state_->lines) {
    Waiter& head = *line.front();  // Only a line's head asks the store, and sleeps on it.
    const bool watched = std::any_of(keys.begin(), keys.end(), [&](const LeasedKey& k) {
      return std::find(head.wake_on.begin(), head.wake_on.end(), k.key) != head.wake_on.end();
    });
    if (!watched) {
      continue;
    }
    if (head.parked) {
      state_->EndSleepLocked(head);  // Its timer is stale now.
      state_->WakeLocked(head);
    } else {
      head.notified = true;
    }
  }
}

bool WaitLines::Head(const Waiter& waiter) const {
  MutexLock lock(state_->mutex);
  return waiter.head;
}

absl::Status WaitLines::Cancelled(const Waiter& waiter) const {
  MutexLock lock(state_->mutex);
  return waiter.cancelled;
}

size_t WaitLines::waiting() const {
  MutexLock lock(state_->mutex);
  return state_->waiting;
}

}  // namespace sluice::server
