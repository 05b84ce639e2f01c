#include "collectives/shm/channel.h"

#include "base/fnv1a.h"
#include "collectives/shm/peers.h"

#include <ddp/errors.h>

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ddp::detail::shm {
namespace {

const char* phase_name(Phase p) {
  switch (p) {
    case COPIED:
      return "copy its data in";
    case REDUCED:
      return "reduce its slice";
    case CONSUMED:
      return "read the results";
  }
  return "?";
}

// The futex word: the counter's low 32 bits, which on a little-endian host
// are its first 4 bytes. It changes whenever the counter does (counters only
// grow by small steps). A big-endian host would sleep on the high half, which
// never changes: refuse to build there rather than hang.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "shm's futex word is the low half of a 64-bit counter: little-endian hosts only");
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t) &&
                  alignof(std::atomic<uint64_t>) >= alignof(uint32_t),
              "shm's futex word aliases the counter's storage");
uint32_t* futex_word(Counter& c) { return reinterpret_cast<uint32_t*>(&c.value); }

void futex_wait(Counter& c, uint32_t expected, std::chrono::milliseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000) * 1000000;
  // Shared (not FUTEX_PRIVATE): the waker may be another process.
  syscall(SYS_futex, futex_word(c), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake(Counter& c) {
  syscall(SYS_futex, futex_word(c), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// "allreduce #12 (SUM, Float, 4096 elements, one step ...)": numbered as
// the operations' Works are (from 0).
std::string to_text(const OpDescriptor& d) {
  const auto variant = static_cast<Variant>(d.variant);
  std::string details;
  const auto add = [&](const std::string& part) {
    details += (details.empty() ? "" : ", ") + part;
  };
  if (d.reduce_op >= 0) add(to_string(static_cast<ReduceOp>(d.reduce_op)));
  if (d.dtype >= 0) add(c10::toString(static_cast<c10::ScalarType>(d.dtype)));
  if (variant == Variant::ZERO_COPY_MEMORY) {
    add(std::to_string(d.count) + " bytes per rank");
  } else if (d.kind >= 0 && static_cast<OpKind>(d.kind) != OpKind::BARRIER) {
    add(std::to_string(d.count) + " elements");
  }
  if (d.root >= 0) add("root " + std::to_string(d.root));
  if (d.tensors > 0) {
    char layout[32];
    std::snprintf(layout, sizeof(layout), "%016llx", static_cast<unsigned long long>(d.layout));
    add(std::to_string(d.tensors) + " tensors, element counts hashed " + layout);
  }
  if (variant == Variant::ONE_STEP) add("one step: at most ShmOptions::small_bytes");
  if (variant == Variant::PIPELINED) add("pipelined: over ShmOptions::small_bytes");
  if (variant == Variant::ZERO_COPY) {
    add("zero-copy: byte offset " + std::to_string(d.offset) + " of region #" +
        std::to_string(d.region));
  }
  const std::string name = d.kind >= 0 ? to_string(static_cast<OpKind>(d.kind))
                           : variant == Variant::ZERO_COPY_MEMORY ? "allocate_zero_copy"
                                                                  : "a collective";
  return name + " #" + std::to_string(d.op_number - 1) +
         (details.empty() ? "" : " (" + details + ")");
}

bool same(const OpDescriptor& a, const OpDescriptor& b) {
  return a.op_number == b.op_number && a.kind == b.kind && a.variant == b.variant &&
         a.dtype == b.dtype && a.reduce_op == b.reduce_op && a.root == b.root &&
         a.count == b.count && a.region == b.region && a.offset == b.offset &&
         a.tensors == b.tensors && a.layout == b.layout;
}

}  // namespace

Channel::Channel(Segment segment, Config config)
    : segment_(std::move(segment)),
      config_(config),
      world_(segment_.world()),
      slots_(segment_.slots()),
      chunk_(segment_.chunk_bytes()),
      mine_(segment_.control(config.rank)),
      spin_budget_(config.spin_iterations) {}

void Channel::spin_outcome(bool satisfied) {
  if (config_.spin_iterations == 0) return;
  if (satisfied) {
    spin_budget_ = std::min(config_.spin_iterations, std::max(spin_budget_, kMinSpin) * 2);
  } else {
    spin_budget_ = std::min(config_.spin_iterations, std::max(spin_budget_ / 2, kMinSpin));
  }
}

Channel::~Channel() = default;

void Channel::begin_op(const ErrorContext& operation,
                       std::chrono::steady_clock::time_point deadline) {
  op_ = operation;
  deadline_ = deadline;
  const auto now = std::chrono::steady_clock::now();
  next_liveness_check_ = now + config_.liveness_interval;
  op_number_ = mine_.ops_started.fetch_add(1, std::memory_order_relaxed) + 1;
  described_ = OpDescriptor();
  described_.op_number = op_number_;
  announced_ = false;
  // Waits check the flag only when they block: an operation whose peers are
  // all ahead would otherwise run on a group another rank declared broken.
  if (segment_.header().broken.load(std::memory_order_acquire) != 0) {
    throw CommunicationError(broken_context(), "not run: " + broken_reason());
  }
}

bool Channel::peers_began_op() const {
  for (int i = 0; i < kArrivalPolls; ++i) {
    bool all = true;
    for (int q = 0; q < world_ && all; ++q) {
      all = q == config_.rank ||
            segment_.control(q).ops_started.load(std::memory_order_acquire) >= op_number_;
    }
    if (all) return true;
    cpu_relax();
  }
  return false;
}

void Channel::describe(OpKind kind, int64_t count, int dtype, int reduce_op, int root,
                       Variant variant) {
  described_.kind = static_cast<int32_t>(kind);
  described_.variant = static_cast<uint32_t>(variant);
  described_.count = count;
  described_.dtype = dtype;
  described_.reduce_op = reduce_op;
  described_.root = root;
}

void Channel::describe_allocation(int64_t bytes_per_rank) {
  described_.variant = static_cast<uint32_t>(Variant::ZERO_COPY_MEMORY);
  described_.count = bytes_per_rank;
}

void Channel::describe_tensors(const std::vector<int64_t>& numels) {
  Fnv1a layout;  // over the counts' bytes
  for (int64_t n : numels) layout.add(n);
  described_.tensors = static_cast<int32_t>(numels.size());
  described_.layout = layout.value();
}

void Channel::describe_memory(uint64_t region, uint64_t offset) {
  described_.region = region;
  described_.offset = offset;
}

uint64_t Channel::begin_step(bool writes) {
  const bool first = !announced_;
  const uint64_t step = take_steps(1);  // the first step waits and announces there
  if (writes && !first) wait_until_slot_free(step);
  return step;
}

uint64_t Channel::take_steps(uint64_t n) {
  const uint64_t first = next_step_;
  next_step_ += n;
  if (!announced_) {
    wait_until_slot_free(first);
    announce(first);
  }
  return first;
}

void Channel::wait_until_slot_free(uint64_t step) {
  // The slot of `step` last held step - slots; every rank must have consumed it.
  if (step >= static_cast<uint64_t>(slots_)) wait_all(CONSUMED, step - slots_);
}

void Channel::announce(uint64_t step) {
  segment_.descriptor(config_.rank, static_cast<int>(step % static_cast<uint64_t>(slots_))) =
      described_;
  first_step_ = step;
  announced_ = true;
}

void Channel::agree(int peer) {
  const OpDescriptor& theirs =
      segment_.descriptor(peer, static_cast<int>(first_step_ % static_cast<uint64_t>(slots_)));
  if (same(theirs, described_)) return;
  const std::string why = "rank " + std::to_string(peer) + " issued " + to_text(theirs) +
                          " where this rank issued " + to_text(described_);
  mark_broken(format_context(op_) + ": " + why, peer);
  const bool zero_copy = described_.variant == static_cast<uint32_t>(Variant::ZERO_COPY);
  throw CollectiveMismatch(
      op_.about({peer}),
      why +
          ". Every rank must issue the same collectives, with the same "
          "element counts, dtypes, reduce ops and roots, in the same order, "
          "with the same ShmOptions" +
          (zero_copy ? ", on the same part of the same zero-copy region" : ""));
}

void Channel::agree_all() {
  for (int q = 0; q < world_; ++q) {
    if (q != config_.rank) agree(q);
  }
}

void Channel::publish(Phase phase, uint64_t step) {
  Counter& c = mine_.phase[phase];
  c.value.store(step + 1, std::memory_order_seq_cst);
  published_[phase] = step + 1;
  if (c.waiters.load(std::memory_order_seq_cst) != 0) futex_wake(c);
}

void Channel::finish_step(uint64_t step) {
  for (int p = 0; p < kPhases; ++p) {
    if (published_[p] < step + 1) publish(static_cast<Phase>(p), step);
  }
  mine_.progress_ms.store(monotonic_ms(), std::memory_order_relaxed);
}

void Channel::wait_all(Phase phase, uint64_t step) {
  for (int q = 0; q < world_; ++q) {
    if (q != config_.rank) wait(q, phase, step);
  }
}

bool Channel::all_reached(Phase phase, uint64_t step) const {
  return first_behind(phase, step) < 0;
}

int Channel::first_behind(Phase phase, uint64_t step) const {
  for (int q = 0; q < world_; ++q) {
    if (q != config_.rank && !reached(q, phase, step)) return q;
  }
  return -1;
}

void Channel::wait(int peer, Phase phase, uint64_t step, bool spin) {
  Counter& c = segment_.control(peer).phase[phase];
  const uint64_t target = step + 1;
  if (c.value.load(std::memory_order_acquire) >= target) return;
  if (spin) {
    for (int i = 0; i < spin_budget_; ++i) {
      cpu_relax();
      if (c.value.load(std::memory_order_acquire) >= target) return spin_outcome(true);
    }
    spin_outcome(false);
  }
  for (;;) {
    c.waiters.fetch_add(1, std::memory_order_seq_cst);
    const uint64_t seen = c.value.load(std::memory_order_seq_cst);
    if (seen < target) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline_ - std::chrono::steady_clock::now());
      futex_wait(c, static_cast<uint32_t>(seen),
                 std::clamp(left, std::chrono::milliseconds(1), config_.liveness_interval));
    }
    c.waiters.fetch_sub(1, std::memory_order_seq_cst);
    if (c.value.load(std::memory_order_acquire) >= target) return;
    check(peer, phase, step);
  }
}

// Between sleeps: has the group broken, the peer left or died, or the time
// run out? Reading the peer's /proc entry is rate-limited.
void Channel::check(int peer, Phase phase, uint64_t step) {
  if (segment_.header().broken.load(std::memory_order_acquire) != 0) {
    throw CommunicationError(broken_context(), broken_reason());
  }
  const RankControl& theirs = segment_.control(peer);
  if (theirs.left.load(std::memory_order_acquire) != 0) fail_waiting(peer, phase, step, false);
  const auto now = std::chrono::steady_clock::now();
  if (now >= deadline_) fail_waiting(peer, phase, step, true);
  if (config_.check_pids && now >= next_liveness_check_) {
    next_liveness_check_ = now + config_.liveness_interval;
    if (process_state(theirs.pid.load(std::memory_order_relaxed)) == ProcessState::DEAD) {
      fail_waiting(peer, phase, step, false);
    }
  }
}

void Channel::fail_waiting(int peer, Phase phase, uint64_t step, bool timed_out) {
  const RankControl& theirs = segment_.control(peer);
  const int32_t pid = theirs.pid.load(std::memory_order_relaxed);
  const ProcessState state = config_.check_pids ? process_state(pid) : ProcessState::UNKNOWN;
  const bool left = theirs.left.load(std::memory_order_acquire) != 0;
  const uint64_t their_ops = theirs.ops_started.load(std::memory_order_relaxed);
  const int64_t quiet_ms = monotonic_ms() - theirs.progress_ms.load(std::memory_order_relaxed);

  std::string what = "rank " + std::to_string(peer) + " (pid " + std::to_string(pid) + ")";
  std::string why;
  if (state == ProcessState::DEAD) {
    why = what + " died (killed or crashed) while this rank waited for it to " + phase_name(phase) +
          "; see its output";
  } else if (left) {
    why = what +
          " closed its group (exited or destroyed it) before it issued this "
          "collective; see its output";
  } else {
    why = what + " did not " + phase_name(phase) + " within the timeout: its process is " +
          to_string(state) + ", it has begun " + std::to_string(their_ops) +
          " collective(s) (this is #" + std::to_string(op_number_) + "), its last step was " +
          std::to_string(quiet_ms) + " ms ago";
  }
  std::string message = "failed at step " + std::to_string(step) + ": " + why;
  mark_broken(format_context(op_) + ": " + why, peer);
  const ErrorContext context = op_.about({peer});
  if (timed_out) {
    throw TimeoutError(context, message +
                                    ". A rank may be stuck, stopped, or issuing a different "
                                    "collective; DDP_DEBUG=detail compares collectives across "
                                    "ranks.");
  }
  throw CommunicationError(context, message);
}

void Channel::mark_broken(const std::string& reason, int culprit) {
  Header& h = segment_.header();
  uint32_t expected = 0;
  if (h.claim.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    const size_t n = std::min(reason.size(), sizeof(h.reason) - 1);
    std::memcpy(h.reason, reason.data(), n);
    h.reason[n] = '\0';
    h.culprit.store(culprit >= 0 ? 1 + static_cast<uint32_t>(culprit) : 0,
                    std::memory_order_relaxed);
    h.broken.store(1 + static_cast<uint32_t>(config_.rank), std::memory_order_release);
  }
  wake_all();
}

ErrorContext Channel::broken_context() const {
  const Header& h = segment_.header();
  const uint32_t by = h.broken.load(std::memory_order_acquire);
  ErrorContext context = op_.about({});
  if (by == 0) return context;
  for (const uint32_t r : {by, h.culprit.load(std::memory_order_relaxed)}) {
    const int rank = static_cast<int>(r) - 1;
    if (rank >= 0 && rank != config_.rank &&
        std::find(context.peers.begin(), context.peers.end(), rank) == context.peers.end()) {
      context.peers.push_back(rank);
    }
  }
  return context;
}

std::string Channel::broken_reason() const {
  const Header& h = segment_.header();
  const uint32_t by = h.broken.load(std::memory_order_acquire);
  if (by == 0) return "";
  return "the group was broken by rank " + std::to_string(by - 1) + ": " + h.reason;
}

void Channel::leave() {
  mine_.left.store(1, std::memory_order_seq_cst);
  wake_all();
}

void Channel::wake_all() {
  for (int q = 0; q < world_; ++q) {
    for (int p = 0; p < kPhases; ++p) futex_wake(segment_.control(q).phase[p]);
  }
}

}  // namespace ddp::detail::shm
