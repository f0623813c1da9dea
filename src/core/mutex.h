#pragma once

// The locks of the memory store's shards (and of a DirectLimiter whose state needs 128 bits),
// in a form clang's -Wthread-safety understands.
//
// SpinLock, not std::mutex: a shard is held for a few tens of nanoseconds (a map probe and an
// integer decision), shorter than a futex sleep and wake-up, and two threads on one hot key
// then hand the lock back and forth without entering the kernel. A waiter spins briefly and
// then yields, so a holder that was descheduled still gets the core back. Built on
// std::atomic, which ThreadSanitizer understands (unlike Debian's uninstrumented Abseil).

#include <atomic>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace sluice::internal {

class ABSL_LOCKABLE SpinLock {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    // Acquire: what the previous holder wrote under the lock is visible to us. A free lock is
    // taken inline; the wait is out of line, so that every Lock stays one instruction.
    if (locked_.exchange(true, std::memory_order_acquire)) [[unlikely]] {
      Wait();
    }
  }
  // Takes the lock if it is free, at once; never waits.
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  // Release: publishes what we wrote under the lock to the next holder.
  void Unlock() ABSL_UNLOCK_FUNCTION() { locked_.store(false, std::memory_order_release); }

 private:
  // Spins until the lock looks free, then tries again; yields the core once spinning has not
  // been enough (its holder may have been descheduled).
  [[gnu::noinline]] void Wait() {
    do {
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins < 64) {
          Pause();
        } else {
          std::this_thread::yield();
        }
      }
    } while (locked_.exchange(true, std::memory_order_acquire));
  }

  static void Pause() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
  }

  std::atomic<bool> locked_{false};
};

class ABSL_SCOPED_LOCKABLE SpinLockHolder {
 public:
  explicit SpinLockHolder(SpinLock& lock) ABSL_EXCLUSIVE_LOCK_FUNCTION(lock) : lock_(lock) {
    lock_.Lock();
  }
  ~SpinLockHolder() ABSL_UNLOCK_FUNCTION() { lock_.Unlock(); }
  SpinLockHolder(const SpinLockHolder&) = delete;
  SpinLockHolder& operator=(const SpinLockHolder&) = delete;

 private:
  SpinLock& lock_;
};

// For the rare writer paths (registering a new limit), an ordinary mutex.
class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }

 private:
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

}  // namespace sluice::internal
