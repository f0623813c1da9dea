#include "server/daemon/reloader.h"

#include <utility>

#include "spdlog/spdlog.h"

namespace sluice::server {

Reloader::Reloader(Load load, Apply apply)
    : thread_([state = state_, load = std::move(load), apply = std::move(apply)] {
        Run(state, load, apply);
      }) {}

Reloader::~Reloader() {
  if (!stopped_) {
    (void)Stop();
  }
}

void Reloader::Request(std::string why) {
  {
    std::lock_guard lock(state_->mutex);
    if (state_->stopping) {
      return;
    }
    if (state_->pending) {
      spdlog::info("reload ({}) asked for while one waits to start: one reload serves both", why);
      return;
    }
    if (state_->loading) {
      spdlog::info("reload ({}) asked for while one is loading: it runs when that one ends", why);
    }
    state_->pending = std::move(why);
  }
  state_->wake.notify_one();
}

bool Reloader::Stop() {
  if (stopped_) {
    return *stopped_;
  }
  bool loading = false;
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
    state_->pending.reset();
    loading = state_->loading;
  }
  state_->wake.notify_one();
  // Not busy: the thread is waiting (or about to) and sees `stopping` at once.
  if (loading) {
    thread_.detach();
  } else {
    thread_.join();
  }
  stopped_ = !loading;
  return *stopped_;
}

void Reloader::Run(const std::shared_ptr<State>& state, const Load& load, const Apply& apply) {
  std::unique_lock lock(state->mutex);
  while (true) {
    state->wake.wait(lock, [&] { return state->stopping || state->pending.has_value(); });
    if (state->stopping) {
      return;
    }
    const std::string why = *std::move(state->pending);
    state->pending.reset();
    state->loading = true;
    lock.unlock();
    spdlog::info("reloading the rules ({})", why);
    Rules rules = load();
    lock.lock();
    state->loading = false;
    if (state->stopping) {
      // Stop has returned: the server is draining, and the rules in force stay.
      spdlog::info("reload ({}) finished while stopping: its rules are not applied", why);
      return;
    }
    apply(std::move(rules), why);
  }
}

}  // namespace sluice::server
