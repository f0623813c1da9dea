#pragma once

// Task<T>: a coroutine that produces a T, for code that waits on an asynchronous store without
// holding a thread. A task is lazy: it runs when awaited (co_await task) or started (Start),
// and whoever awaits it resumes when it finishes, on the thread it finished on. Awaiting a
// task that finishes without suspending costs no stack (symmetric transfer), so loops of
// awaits that complete at once (the memory store) are safe.
//
// An exception a task throws is rethrown where it is awaited. A task is owned by its handle:
// destroying a Task that never ran frees it.

#include <coroutine>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <utility>

namespace sluice::internal {

template <typename T>
class [[nodiscard]] Task {
 public:
  struct promise_type;
  using Handle = std::coroutine_handle<promise_type>;

  struct promise_type {
    std::optional<T> value;
    std::exception_ptr error;
    std::coroutine_handle<> awaiting = std::noop_coroutine();

    Task get_return_object() noexcept { return Task(Handle::from_promise(*this)); }
    std::suspend_always initial_suspend() noexcept { return {}; }
    auto final_suspend() noexcept {
      struct ResumeAwaiting {
        bool await_ready() noexcept { return false; }
        std::coroutine_handle<> await_suspend(Handle done) noexcept {
          return done.promise().awaiting;
        }
        void await_resume() noexcept {}
      };
      return ResumeAwaiting{};
    }
    template <typename U>
    void return_value(U&& result) {
      value.emplace(std::forward<U>(result));
    }
    void unhandled_exception() noexcept { error = std::current_exception(); }
  };

  Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      Destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  ~Task() { Destroy(); }

  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
    handle_.promise().awaiting = awaiting;
    return handle_;
  }
  T await_resume() {
    promise_type& promise = handle_.promise();
    if (promise.error) {
      std::rethrow_exception(promise.error);
    }
    return *std::move(promise.value);
  }

 private:
  explicit Task(Handle handle) : handle_(handle) {}
  void Destroy() {
    if (handle_) {
      handle_.destroy();
    }
  }

  Handle handle_;
};

namespace task_internal {

// A coroutine nobody awaits: it runs at once and frees itself when it ends.
struct Detached {
  struct promise_type {
    Detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    // Start's callers handle their errors inside the task; one that escapes is a bug.
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

template <typename T, typename Done>
Detached RunThenCall(Task<T> task, Done done) {
  T result = co_await std::move(task);
  std::move(done)(std::move(result));
}

}  // namespace task_internal

// Runs `task` and calls `done(T)` with its result: before Start returns when the task never
// suspends, else later on the thread that finishes it. `task` must not throw (terminates).
template <typename T, typename Done>
void Start(Task<T> task, Done done) {
  task_internal::RunThenCall(std::move(task), std::move(done));
}

// Runs `task` and waits for its result, blocking this thread: for tests and tools, never for a
// thread that serves requests.
template <typename T>
T Wait(Task<T> task) {
  // Shared, so that the promise outlives a set_value still returning on the other thread.
  auto promise = std::make_shared<std::promise<T>>();
  std::future<T> result = promise->get_future();
  Start(std::move(task), [promise](T value) { promise->set_value(std::move(value)); });
  return result.get();
}

}  // namespace sluice::internal
