#include "base/fault_point.h"

#include "base/mutex.h"

#include <atomic>
#include <csignal>
#include <cstdio>

#include <unistd.h>

namespace ddp::detail {

namespace {

std::atomic<bool> armed{false};
Mutex mutex;
std::string armed_name DDP_GUARDED_BY(mutex);
int passes_left DDP_GUARDED_BY(mutex) = 0;

}  // namespace

void fault_point(const char* name) {
  if (!armed.load(std::memory_order_relaxed)) return;
  MutexLock lock(mutex);
  if (armed_name != name || --passes_left > 0) return;
  std::fprintf(stderr, "ddp: fault point %s: killing this process (pid %d), as armed\n", name,
               static_cast<int>(getpid()));
  std::fflush(stderr);
  std::raise(SIGKILL);
}

void arm_fault_point(const std::string& name, int pass) {
  MutexLock lock(mutex);
  armed_name = name;
  passes_left = pass;
  armed.store(true, std::memory_order_relaxed);
}

}  // namespace ddp::detail
