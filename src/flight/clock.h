// The flight recorder's clocks. Issue and start are stamped in ticks, a
// cheap monotonic counter: the TSC on x86-64 (about 9 ns to read, against 21
// for the steady clock on this project's machines), the steady clock
// elsewhere. A reader turns ticks into steady nanoseconds (ticks_to_ns).
#pragma once

#include <cstdint>
#include <ctime>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace ddp::detail::flight {

// CLOCK_MONOTONIC in nanoseconds: std::chrono::steady_clock's epoch.
// Signal-safe.
inline int64_t steady_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline int64_t now_ticks() {
#if defined(__x86_64__)
  return static_cast<int64_t>(__rdtsc());
#else
  return steady_ns();
#endif
}

}  // namespace ddp::detail::flight
