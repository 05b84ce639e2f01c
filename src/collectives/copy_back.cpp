#include "collectives/copy_back.h"

#include "base/mutex.h"
#include "collectives/error_text.h"

#include <ddp/errors.h>

#include <deque>
#include <list>
#include <set>
#include <thread>
#include <utility>

namespace ddp::detail {

namespace {

class CopyBackQueue {
 public:
  CopyBackQueue() { std::thread([this] { loop(); }).detach(); }

  void push(CopyBack item) {
    {
      MutexLock lock(mutex_);
      const auto deadline = std::chrono::steady_clock::now() + item.timeout;
      arrived_.push_back(InFlight{std::move(item), deadline, nullptr, nullptr});
    }
    cv_.notify_one();
  }

 private:
  struct InFlight {
    CopyBack item;
    std::chrono::steady_clock::time_point deadline;
    Fence landed;  // set once the copies back are queued
    std::exception_ptr error;
  };

  void loop() {
    std::list<InFlight> flying;  // this thread's only
    for (;;) {
      {
        MutexLock lock(mutex_);
        if (flying.empty()) cv_.wait(mutex_, [&]() DDP_REQUIRES(mutex_) { return !arrived_.empty(); });
        while (!arrived_.empty()) {
          flying.push_back(std::move(arrived_.front()));
          arrived_.pop_front();
        }
      }
      bool progressed = false;
      std::set<const void*> waiting;  // groups with an earlier Work not complete
      for (auto it = flying.begin(); it != flying.end();) {
        progressed |= start(*it);
        const bool ready = done(*it);
        const bool first_of_group = waiting.insert(it->item.group).second;
        if (!ready || !first_of_group) {
          ++it;
          continue;
        }
        waiting.erase(it->item.group);  // a later one of its group may complete too
        InFlight f = std::move(*it);
        it = flying.erase(it);
        if (f.error && !f.item.error && f.item.broke) f.item.broke(why(f.error));
        // Outside any lock: the Work's callbacks run here.
        f.item.work->finish(f.error);
        progressed = true;
      }
      if (!progressed && !flying.empty()) {
        std::this_thread::sleep_for(std::chrono::microseconds(10));
      }
    }
  }

  static std::string why(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return cited(e);
    } catch (...) {
      return "an unknown exception";
    }
  }

  // Queues f's copies back once its inputs are copied; whether it did now.
  static bool start(InFlight& f) {
    if (f.landed || f.error) return false;
    if (f.item.error) {
      f.error = f.item.error;
      return true;
    }
    try {
      if (!f.item.inputs_copied()) return late(f, "the copy of its input to host memory");
      f.landed = f.item.stager->to_device(f.item.results, f.item.originals);
    } catch (const std::exception& e) {
      f.error = failed(f, "the copies of its result to the device failed: ", e);
    }
    return true;
  }

  // Whether f is ready to complete.
  static bool done(InFlight& f) {
    if (f.error) return true;
    if (!f.landed) return false;
    try {
      if (f.landed()) return true;
      return late(f, "the copy of its result back to the device");
    } catch (const std::exception& e) {
      f.error = failed(f, "the copies of its result to the device failed: ", e);
      return true;
    }
  }

  // Past its deadline, f fails (and is done); else false.
  static bool late(InFlight& f, const std::string& what) {
    if (std::chrono::steady_clock::now() < f.deadline) return false;
    f.error = std::make_exception_ptr(TimeoutError(
        f.item.work->context(), what + " (staging) did not finish within " +
                                    std::to_string(f.item.timeout.count()) +
                                    " ms: the device is stuck"));
    return true;
  }

  static std::exception_ptr failed(const InFlight& f, const std::string& what,
                                   const std::exception& e) {
    return std::make_exception_ptr(CommunicationError(f.item.work->context(), what + e.what()));
  }

  Mutex mutex_;
  CondVar cv_;
  std::deque<InFlight> arrived_ DDP_GUARDED_BY(mutex_);
};

}  // namespace

void copy_back(CopyBack item) {
  // Never destroyed: its thread may outlive every other static.
  static CopyBackQueue* const queue = new CopyBackQueue();
  queue->push(std::move(item));
}

}  // namespace ddp::detail
