// The shared segment of one shm group: its layout and its life in /dev/shm.
//
// Layout (every field a rank writes lives on its own cache line, so that a
// rank polling one flag never shares a line another rank writes for
// something else):
//
//   Header        one page: magic, geometry, attach count, broken flag
//   RankControl   one per rank: its three step counters, each on its own
//                 line, then its process id, liveness and progress
//   OpDescriptor  one per rank and slot, a line each: what operation the
//                 rank runs at the step that uses the slot (its first)
//   data          rank r's slot s at data + (r * slots + s) * chunk_bytes
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ddp::detail::shm {

constexpr size_t kLine = 64;
constexpr uint64_t kMagic = 0x64647073686d3034ull;  // "ddpshm04": the layout above

// A step counter a rank publishes and its peers wait on. `value` is the
// number of steps done; its low 32 bits are the futex word. `waiters` counts
// ranks blocked in futex on it, so that publishing costs no system call when
// nobody sleeps.
struct alignas(kLine) Counter {
  std::atomic<uint64_t> value{0};
  std::atomic<uint32_t> waiters{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(sizeof(Counter) == kLine);

// The phases of a step; a rank's counter of phase P holds how many steps it
// has finished P of.
enum Phase : int { COPIED = 0, REDUCED = 1, CONSUMED = 2 };
constexpr int kPhases = 3;

struct alignas(kLine) RankControl {
  Counter phase[kPhases];
  // Written once at attach, read by peers' liveness checks.
  alignas(kLine) std::atomic<int32_t> pid{0};
  std::atomic<uint32_t> left{0};         // 1 once the rank closed its group
  std::atomic<uint64_t> ops_started{0};  // operations this rank has begun
  std::atomic<int64_t> progress_ms{0};   // CLOCK_MONOTONIC ms of its last step
};

// What a rank says an operation is, at the operation's first step, so that
// its peers can check they run the same one (channel.h: describe, agree).
// Plain fields: written before the rank publishes COPIED of that step and
// read after a peer sees it, as slot contents are.
struct alignas(kLine) OpDescriptor {
  uint64_t op_number = 0;  // the rank's count of operations, from 1
  int32_t kind = -1;       // ddp::OpKind; -1: none (said nothing, or an allocation)
  uint32_t variant = 0;    // Variant (channel.h): the path, or an allocation
  int32_t dtype = -1;      // at::ScalarType; -1: none
  int32_t reduce_op = -1;  // ReduceOp; -1: none
  int32_t root = -1;       // -1: none
  int32_t tensors = 0;     // allreduce_coalesced: how many tensors
  int64_t count = 0;       // elements (in all)
  uint64_t region = 0;     // zero-copy: the region's number
  uint64_t offset = 0;     // zero-copy: the tensor's byte offset in its part
  uint64_t layout = 0;     // allreduce_coalesced: a hash of the tensors' element counts
};
static_assert(sizeof(OpDescriptor) == kLine);

struct alignas(4096) Header {
  uint64_t magic;
  uint32_t world;
  uint32_t slots;
  uint64_t chunk_bytes;
  alignas(kLine) std::atomic<uint32_t> attached{0};
  // Broken: 0 healthy; else 1 + the rank that broke it. The rank that wins
  // `claim` writes `reason` and `culprit`, then `broken` (release): readers
  // see them whole once they see `broken`.
  alignas(kLine) std::atomic<uint32_t> broken{0};
  std::atomic<uint32_t> claim{0};
  char reason[1024];
  // 1 + the rank the failure is about (a peer that left, died, stalled or
  // disagreed); 0: none.
  std::atomic<uint32_t> culprit{0};
};

// A named /dev/shm file of `bytes`, created exclusively (0600), its pages
// reserved, and mapped shared; the name is removed again if that fails.
// Throws CommunicationError naming the call and errno.
void* create_mapping(const std::string& name, size_t bytes);
// Maps an existing one; a different size is an InvalidArgument ending with
// `on_size_mismatch` (what to do).
void* open_mapping(const std::string& name, size_t bytes, const std::string& on_size_mismatch);
// A name no other segment has: "/ddp-shm-<pid>-<pid namespace inode>-<random>".
// First removes the names that dead creators in this PID namespace left
// behind (killed before the last peer mapped their segment).
std::string fresh_segment_name();

// A mapping of a group's segment. Move-only; unmaps on destruction.
class Segment {
 public:
  // Bytes of a segment for this geometry.
  static size_t size_for(int world, int slots, int64_t chunk_bytes);

  // Creates `name` exclusively (0600) and initialises its header; throws
  // CommunicationError on failure, naming the call and errno.
  static Segment create(const std::string& name, int world, int slots, int64_t chunk_bytes);
  // Maps an existing `name` and checks its geometry against the arguments.
  static Segment open(const std::string& name, int world, int slots, int64_t chunk_bytes);
  // shm_unlink, ignoring a name already gone. Returns whether it removed it.
  static bool unlink(const std::string& name);

  Segment() = default;
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  ~Segment();

  Header& header() const { return *static_cast<Header*>(base_); }
  RankControl& control(int rank) const;
  // Rank `rank`'s slot `slot`, and the descriptor of the step using it.
  char* slot(int rank, int slot) const;
  OpDescriptor& descriptor(int rank, int slot) const;
  int world() const { return static_cast<int>(header().world); }
  int slots() const { return static_cast<int>(header().slots); }
  int64_t chunk_bytes() const { return static_cast<int64_t>(header().chunk_bytes); }

 private:
  Segment(void* base, size_t bytes) : base_(base), bytes_(bytes) {}
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace ddp::detail::shm
