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
//
// Agreement: at an operation's first step every rank writes what the
// operation is (an OpDescriptor: kind, element count, dtype, reduce op, root,
// its number) into the descriptor of that step's slot, before it publishes
// COPIED; once it sees a peer's COPIED of that step it compares the peer's.
// Ranks that issue different collectives, or the same with different
// arguments, fail there with CollectiveMismatch on every rank, always,
// before any data is mixed. The slot-free rule protects descriptors as it
// does slots.
#pragma once

#include "collectives/shm/segment.h"

#include <ddp/errors.h>
#include <ddp/process_group.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ddp::detail::shm {

// One iteration of a polling loop: tells the core (and a sibling
// hyper-thread) that this thread is waiting.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// OpDescriptor::variant: what an shm operation is beyond its ddp::OpKind.
// The all-reduce's paths differ, so that ranks whose ShmOptions::small_bytes
// differ are told so rather than mixing paths.
enum class Variant : uint32_t {
  NONE = 0,
  ONE_STEP,          // all-reduce of at most small_bytes
  PIPELINED,         // all-reduce of more
  ZERO_COPY,         // all-reduce in zero-copy memory (with its region and offset)
  ZERO_COPY_MEMORY,  // allocate_zero_copy (no OpKind; count: bytes per rank)
};

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

  // Starts an operation: errors carry `operation` (its Work's context), and every wait of it
  // ends by `deadline` (its issue time plus the timeout, so that the
  // backend's error, naming the peer, comes before Work::wait's own).
  void begin_op(const ErrorContext& operation, std::chrono::steady_clock::time_point deadline);
  // What the running operation is: after begin_op, before its first step.
  void describe(OpKind kind, int64_t count, int dtype = -1, int reduce_op = -1, int root = -1,
                Variant variant = Variant::NONE);
  void describe_allocation(int64_t bytes_per_rank);
  // And, for a zero-copy all-reduce, which memory it reduces; for a
  // coalesced one, the element counts of its tensors (before describe()).
  void describe_memory(uint64_t region, uint64_t offset);
  void describe_tensors(const std::vector<int64_t>& numels);
  // Takes the next step's number; waits until its slot is free on this rank
  // when `writes` (every peer consumed what step - slots left there). The
  // operation's first step always waits so, and announces its descriptor.
  uint64_t begin_step(bool writes);
  // Once `peer` (every peer) published COPIED of this operation's first
  // step: throws CollectiveMismatch, having marked the group broken, unless
  // it runs the same operation as this rank.
  void agree(int peer);
  void agree_all();
  RankControl& control(int rank) const { return segment_.control(rank); }
  char* slot(int rank, uint64_t step) const {
    return segment_.slot(rank, static_cast<int>(step % static_cast<uint64_t>(slots_)));
  }
  // This rank finished `phase` of `step`.
  void publish(Phase phase, uint64_t step);
  // Publishes every phase of `step` not yet published (the last call of a step).
  void finish_step(uint64_t step);
  // Takes `n` consecutive step numbers at once, for an operation that
  // schedules its own steps (pipeline.h); returns the first.
  uint64_t take_steps(uint64_t n);
  // Without blocking: has `peer` finished `phase` of `step`? Has every rank?
  bool reached(int peer, Phase phase, uint64_t step) const {
    return segment_.control(peer).phase[phase].value.load(std::memory_order_acquire) >= step + 1;
  }
  bool all_reached(Phase phase, uint64_t step) const;
  // The first rank (other than this one) that has not finished `phase` of
  // `step`; -1 if none.
  int first_behind(Phase phase, uint64_t step) const;
  // Whether every peer has begun this rank's running operation (or a later
  // one), polling at most kArrivalPolls times: then the operation waits for
  // nobody who is not inside it (ShmProcessGroup's caller-run path).
  bool peers_began_op() const;
  static constexpr int kArrivalPolls = 1000;
  // Polls to spend before blocking, adapted to what spinning has been
  // worth lately (see spin_outcome).
  int spin_budget() const { return spin_budget_; }
  // After a wait: `satisfied` when spinning saw the data arrive. Success
  // doubles the budget (up to spin_iterations), failure halves it (down to
  // a probe of kMinSpin): where ranks share cores with each other or other
  // work, polling for a peer that is not running only delays it, and the
  // budget shrinks; where each rank has its own core it stays high.
  void spin_outcome(bool satisfied);
  static constexpr int kMinSpin = 64;
  // Until `peer` finished `phase` of `step`; throws CommunicationError /
  // TimeoutError naming the peer (and marks the segment broken). Spins
  // first when `spin`.
  void wait(int peer, Phase phase, uint64_t step, bool spin = true);
  // wait() for every other rank.
  void wait_all(Phase phase, uint64_t step);

  // Records the first failure in the segment, so that every rank fails at
  // once citing it (and naming `culprit`, the rank it is about, if any), and
  // wakes every blocked rank.
  void mark_broken(const std::string& reason, int culprit = -1);
  // Tells the peers this rank closed its group.
  void leave();

 private:
  [[noreturn]] void fail_waiting(int peer, Phase phase, uint64_t step, bool timed_out);
  void check(int peer, Phase phase, uint64_t step);
  // Until every rank consumed what step - slots left in the slot of `step`.
  void wait_until_slot_free(uint64_t step);
  // Writes this rank's descriptor for `step`, the operation's first.
  void announce(uint64_t step);
  void wake_all();
  std::string broken_reason() const;
  // The context of an error citing broken_reason(): its peers are the rank
  // that broke the group and the rank its failure is about (each when
  // another one).
  ErrorContext broken_context() const;

  Segment segment_;
  const Config config_;
  const int world_, slots_;
  const int64_t chunk_;
  RankControl& mine_;
  // Of the operation running (the progress thread's own state).
  ErrorContext op_;  // the running operation's (Work::context)
  std::chrono::steady_clock::time_point deadline_;
  uint64_t op_number_ = 0;
  OpDescriptor described_;  // what this rank says the operation is
  bool announced_ = false;  // its first step was taken
  uint64_t first_step_ = 0;
  uint64_t next_step_ = 0;
  uint64_t published_[kPhases] = {0, 0, 0};
  int spin_budget_ = 0;
  std::chrono::steady_clock::time_point next_liveness_check_;
};

}  // namespace ddp::detail::shm
