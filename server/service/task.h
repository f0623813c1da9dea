#pragma once

// Task<T>: a coroutine that produces a T, for code that waits on an asynchronous store without
// holding a thread. A task is lazy: it runs when awaited (co_await task) or started (Start),
// and whoever awaits it resumes when it finishes, on the thread it finished on. Awaiting a
// task that finishes without suspending costs no stack (symmetric transfer), so loops of
// awaits that complete at once (the memory store) are safe.
//
// An exception a task throws is rethrown where it is awaited. A task is owned by its handle:
// destroying a Task that never ran frees it.
//
// Detached: a coroutine nobody awaits, which runs at once and frees itself at its end; the
// root of a chain of tasks (Start).

#include <array>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <future>
#include <memory>
#include <new>
#include <optional>
#include <utility>

namespace sluice::internal {

// Coroutine frames are allocated per request, and the larger ones (a kilobyte and more) are
// past malloc's per-thread cache: each thread keeps a few freed frames of each size class for
// the next. A frame freed on another thread than it was allocated on (a store's thread) joins
// that thread's cache, which is bounded, so memory cannot pile up.
//
// Under AddressSanitizer frames go straight to the allocator, so that it sees every misuse.
class FrameCache {
 public:
  static void* Allocate(size_t size) {
    const size_t c = SizeClass(size);
    if (c < kClasses && kEnabled) {
      Lists* lists = ThreadLists();
      if (lists == nullptr) {
        return ::operator new((c + 1) * kGranule);
      }
      if (Free* f = lists->head[c]; f != nullptr) {
        lists->head[c] = f->next;
        --lists->count[c];
        return f;
      }
      return ::operator new((c + 1) * kGranule);
    }
    return ::operator new(size);
  }

  static void Deallocate(void* frame, size_t size) noexcept {
    const size_t c = SizeClass(size);
    if (c < kClasses && kEnabled) {
      Lists* lists = ThreadLists();
      if (lists != nullptr && lists->count[c] < kKeptPerClass) {
        lists->head[c] = ::new (frame) Free{lists->head[c]};
        ++lists->count[c];
        return;
      }
      ::operator delete(frame);
      return;
    }
    ::operator delete(frame);
  }

 private:
#if defined(__SANITIZE_ADDRESS__)
  static constexpr bool kEnabled = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  static constexpr bool kEnabled = false;
#else
  static constexpr bool kEnabled = true;
#endif
#else
  static constexpr bool kEnabled = true;
#endif
  static constexpr size_t kGranule = 256;
  static constexpr size_t kClasses = 16;  // Frames up to 4 KB.
  static constexpr size_t kKeptPerClass = 64;

  struct Free {
    Free* next;
  };
  struct Lists {
    std::array<Free*, kClasses> head{};
    std::array<size_t, kClasses> count{};
    ~Lists() {
      exited = true;
      for (size_t c = 0; c < kClasses; ++c) {
        while (Free* f = head[c]) {
          head[c] = f->next;
          ::operator delete(f);
        }
      }
    }
  };

  static size_t SizeClass(size_t size) { return (size + kGranule - 1) / kGranule - 1; }
  // This thread's lists; null once the thread is exiting and they are gone (a frame freed by
  // another thread-local's destructor).
  static Lists* ThreadLists() {
    if (exited) {
      return nullptr;
    }
    thread_local Lists lists;
    return &lists;
  }
  static inline thread_local bool exited = false;
};

// The frame allocation of every coroutine type here.
struct CachedFrame {
  static void* operator new(size_t size) { return FrameCache::Allocate(size); }
  static void operator delete(void* frame, size_t size) noexcept {
    FrameCache::Deallocate(frame, size);
  }
};

template <typename T>
class [[nodiscard]] Task {
 public:
  struct promise_type;
  using Handle = std::coroutine_handle<promise_type>;

  struct promise_type : CachedFrame {
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

// The return type of a coroutine that nobody awaits: it runs at once, and frees itself when
// it ends. An exception that escapes it is a bug: it terminates.
struct Detached {
  struct promise_type : CachedFrame {
    Detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

// Runs `task` and calls `done(T)` with its result: before Start returns when the task never
// suspends, else later on the thread that finishes it. `task` must not throw (terminates).
template <typename T, typename Done>
Detached Start(Task<T> task, Done done) {
  T result = co_await std::move(task);
  std::move(done)(std::move(result));
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
