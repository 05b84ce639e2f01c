// What the shm tests share (shm_test.cpp, shm_zero_copy_test.cpp).
#pragma once

#include <ddp/backends/shm.h>

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>

namespace ddp::testing {

// A tiny ring: 4 KiB chunks, 2 slots, so that a few thousand elements
// already cross chunk, slice and slot-reuse boundaries.
inline ShmOptions tiny() {
  // No spinning: every wait blocks in futex, the path spinning hides.
  return ShmOptions().chunk_bytes(4096).slots(2).small_bytes(1024).spin_iterations(0).timeout(
      std::chrono::seconds(60));
}

inline ProcessGroupPtr shm_group(StorePtr store, int rank, int size, ShmOptions o = tiny()) {
  return std::make_shared<ShmProcessGroup>(std::move(store), rank, size, o);
}

// This process's segments in /dev/shm (rank 0 of a thread-ranked group is
// this process, and the names it creates carry its pid).
inline int own_segments() {
  const std::string prefix = "ddp-shm-" + std::to_string(getpid()) + "-";
  int count = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) count += std::string(e->d_name).rfind(prefix, 0) == 0;
    closedir(d);
  }
  return count;
}

}  // namespace ddp::testing
