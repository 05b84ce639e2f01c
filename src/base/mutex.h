// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable in a
// form that clang's thread-safety analysis checks (base/thread_annotations.h).
//
// Contract
// - Mutex is a std::mutex (RecursiveMutex a std::recursive_mutex); MutexLock
//   holds one for a scope and may give it back and take it again
//   (unlock()/lock()) within that scope.
// - CondVar waits with the Mutex held, as std::condition_variable does with a
//   std::unique_lock: the wait gives the mutex back while it sleeps and holds
//   it again on return. Predicates run with the mutex held; a lambda that
//   reads guarded members says so: `[&]() DDP_REQUIRES(mu_) { return done_; }`.
// - Every wait with a deadline says whether the predicate became true
//   (the timed forms return false on timeout), so no wait is unbounded
//   unless its caller chose wait().
#pragma once

#include "base/thread_annotations.h"

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace ddp {

class DDP_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() DDP_ACQUIRE() { mutex_.lock(); }
  void unlock() DDP_RELEASE() { mutex_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mutex_;
};

class DDP_CAPABILITY("mutex") RecursiveMutex {
 public:
  RecursiveMutex() = default;
  RecursiveMutex(const RecursiveMutex&) = delete;
  RecursiveMutex& operator=(const RecursiveMutex&) = delete;

  void lock() DDP_ACQUIRE() { mutex_.lock(); }
  void unlock() DDP_RELEASE() { mutex_.unlock(); }

 private:
  std::recursive_mutex mutex_;
};

// Holds a Mutex (or RecursiveMutex) from construction to the end of scope.
template <class M>
class DDP_SCOPED_CAPABILITY BasicMutexLock {
 public:
  explicit BasicMutexLock(M& mutex) DDP_ACQUIRE(mutex) : mutex_(mutex) { mutex_.lock(); }
  ~BasicMutexLock() DDP_RELEASE() {
    if (held_) mutex_.unlock();
  }
  BasicMutexLock(const BasicMutexLock&) = delete;
  BasicMutexLock& operator=(const BasicMutexLock&) = delete;

  // Gives the mutex back before the scope ends (and takes it again).
  void unlock() DDP_RELEASE() {
    mutex_.unlock();
    held_ = false;
  }
  void lock() DDP_ACQUIRE() {
    mutex_.lock();
    held_ = true;
  }

 private:
  M& mutex_;
  bool held_ = true;
};

using MutexLock = BasicMutexLock<Mutex>;
using RecursiveMutexLock = BasicMutexLock<RecursiveMutex>;

class CondVar {
 public:
  void notify_one() { cv_.notify_one(); }
  void notify_all() { cv_.notify_all(); }

  // Until `ready()` holds.
  template <class Predicate>
  void wait(Mutex& mutex, Predicate ready) DDP_REQUIRES(mutex) {
    std::unique_lock<std::mutex> lock(mutex.mutex_, std::adopt_lock);
    cv_.wait(lock, std::move(ready));
    lock.release();
  }

  // Until `ready()` holds (true) or `timeout` passed (false).
  template <class Rep, class Period, class Predicate>
  bool wait_for(Mutex& mutex, std::chrono::duration<Rep, Period> timeout, Predicate ready)
      DDP_REQUIRES(mutex) {
    std::unique_lock<std::mutex> lock(mutex.mutex_, std::adopt_lock);
    bool result = cv_.wait_for(lock, timeout, std::move(ready));
    lock.release();
    return result;
  }

  // Until `ready()` holds (true) or `deadline` passed (false).
  template <class Clock, class Duration, class Predicate>
  bool wait_until(Mutex& mutex, std::chrono::time_point<Clock, Duration> deadline, Predicate ready)
      DDP_REQUIRES(mutex) {
    std::unique_lock<std::mutex> lock(mutex.mutex_, std::adopt_lock);
    bool result = cv_.wait_until(lock, deadline, std::move(ready));
    lock.release();
    return result;
  }

 private:
  std::condition_variable cv_;
};

}  // namespace ddp
