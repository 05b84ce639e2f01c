// A deadline for calls that have none of their own. libtorch's TCPStore
// blocks in recv() without a deadline when the far end accepted the
// connection but never answers (another program on MASTER_PORT, a stopped
// rank 0, a link that went down), so such calls run on a helper thread and
// the caller waits for them at most `limit`.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <thread>

namespace ddp::detail {

// Runs `body` on its own thread; returns its result, or rethrows what it
// threw. If it has not finished within `limit`, calls `on_timeout` (which
// must throw) and leaves the thread behind, blocked where it is: it owns
// everything it uses (capture by value), and the process exits past it.
template <typename T>
T run_bounded(std::function<T()> body, std::chrono::milliseconds limit,
              const std::function<void()>& on_timeout) {
  auto task = std::make_shared<std::packaged_task<T()>>(std::move(body));
  std::future<T> result = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  if (result.wait_for(limit) != std::future_status::ready) on_timeout();
  return result.get();
}

}  // namespace ddp::detail
