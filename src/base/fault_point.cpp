#include "base/fault_point.h"

#include "base/mutex.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

namespace ddp::detail {

namespace {

std::atomic<bool> armed{false};
Mutex mutex;
std::string armed_name DDP_GUARDED_BY(mutex);
int passes_left DDP_GUARDED_BY(mutex) = 0;

// $DDP_FAULT_POINT, "NAME:PASS", arms NAME from the start: how a process
// that a test or ddp-chaos starts is told where to die.
bool armed_from_environment() {
  const char* value = std::getenv("DDP_FAULT_POINT");
  if (value == nullptr) return false;
  const std::string text = value;
  const auto colon = text.rfind(':');
  const int pass = colon == std::string::npos ? 0 : std::atoi(text.c_str() + colon + 1);
  if (pass < 1) {
    std::fprintf(stderr, "ddp: DDP_FAULT_POINT='%s' is not NAME:PASS (PASS >= 1); ignored\n",
                 value);
    return false;
  }
  arm_fault_point(text.substr(0, colon), pass);
  return true;
}

[[maybe_unused]] const bool environment_armed = armed_from_environment();

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
