// The step protocol of the shm backend (docs/backends.md, "## shm").
//
// Every operation is a sequence of steps; steps are numbered across
// operations (a rank's step k is every rank's step k). Step s uses slot
// s % slots of every rank. A rank announces the phases of each step on its
// three counters (COPIED, REDUCED, CONSUMED: the number of steps it finished
// that phase of); peers wait until a counter reaches s + 1. A rank writes its
// slot for step s only once every rank's CONSUMED reached s - slots + 1, that
// is once nobody still reads what step s - slots left there.
//
// Memory ordering: slot contents are plain stores before a counter's release
// (seq_cst) store; a reader's acquire load of the counter that sees s + 1
// makes them visible. In the other direction, a reader's loads of a slot come
// before its CONSUMED store; the writer's acquire load of that counter orders
// its next writes after them. Blocking: the waiter increments `waiters`, then
// re-reads the counter, then sleeps in futex on the counter's low 32 bits;
// the publisher stores the counter, then reads `waiters` (all seq_cst): one of
// them sees the other, so a wake-up is never lost, and FUTEX_WAIT itself
// returns at once if the word moved.
#pragma once

#include "collectives/shm/segment.h"

#include <chrono>
#include <cstdint>
#include <string>

namespace ddp::detail::shm {

class Channel {
 public:
  struct Config {
    int rank = 0;
    int spin_iterations = 0;
    std::chrono::milliseconds liveness_interval{100};
    // Whether peers' process ids are meaningful here (same PID namespace).
    bool check_pids = true;
  };
  Channel(Segment segment, Config config);
  ~Channel();

  int rank() const { return config_.rank; }
  int world() const { return world_; }
  int slots() const { return slots_; }
  int64_t chunk_bytes() const { return chunk_; }

  // Starts an operation: errors name `description`, and every wait of it
  // ends by `deadline` (its issue time plus the timeout, so that the
  // backend's error, naming the peer, comes before Work::wait's own).
  void begin_op(const std::string& description, std::chrono::steady_clock::time_point deadline);
  // Takes the next step's number; waits until its slot is free on this rank
  // when `writes` (every peer consumed what step - slots left there).
  uint64_t begin_step(bool writes);
  char* slot(int rank, uint64_t step) const {
    return segment_.slot(rank, static_cast<int>(step % static_cast<uint64_t>(slots_)));
  }
  // This rank finished `phase` of `step`.
  void publish(Phase phase, uint64_t step);
  // Publishes every phase of `step` not yet published (the last call of a step).
  void finish_step(uint64_t step);
  // Until `peer` finished `phase` of `step`; throws CommunicationError /
  // TimeoutError naming the peer (and marks the segment broken).
  void wait(int peer, Phase phase, uint64_t step);
  // wait() for every other rank.
  void wait_all(Phase phase, uint64_t step);

  // Records the first failure in the segment, so that every rank fails at
  // once citing it, and wakes every blocked rank.
  void mark_broken(const std::string& reason);
  // Tells the peers this rank closed its group.
  void leave();

 private:
  [[noreturn]] void fail_waiting(int peer, Phase phase, uint64_t step, bool timed_out);
  void check(int peer, Phase phase, uint64_t step);
  void wake_all();
  std::string broken_reason() const;

  Segment segment_;
  const Config config_;
  const int world_, slots_;
  const int64_t chunk_;
  RankControl& mine_;
  // Of the operation running (the progress thread's own state).
  std::string op_;
  std::chrono::steady_clock::time_point deadline_;
  uint64_t op_number_ = 0;
  uint64_t next_step_ = 0;
  uint64_t published_[kPhases] = {0, 0, 0};
  std::chrono::steady_clock::time_point next_liveness_check_;
};

}  // namespace ddp::detail::shm
