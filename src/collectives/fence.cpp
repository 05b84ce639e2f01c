#include "collectives/fence.h"

#include <thread>

namespace ddp::detail {

bool wait_for_fence(const Fence& fence, std::chrono::steady_clock::time_point deadline) {
  using std::chrono::steady_clock;
  const auto yield_until = steady_clock::now() + std::chrono::microseconds(200);
  for (;;) {
    if (fence()) return true;
    const auto now = steady_clock::now();
    if (now >= deadline) return false;
    if (now < yield_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

}  // namespace ddp::detail
