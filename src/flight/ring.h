// The flight recorder's memory (include/ddp/flight_recorder.h): one ring of
// records that every recorded group of the process writes, the table of
// those groups, and what a dump needs to name the process.
//
// The ring is lock-free. A collective claims the next record number with
// one atomic increment and writes its slot (number mod capacity) as a
// seqlock: the slot's id is 0 while its fields are written, then the
// record's number + 1. The backend's start and completion update a slot only
// while it still holds their record, time first, then the state (release);
// should the slot be taken by a newer record between that check and those
// stores (more than `capacity` collectives issued while one ran), the newer
// record shows the older one's state. Readers (a dump, which may run in a
// signal handler, and flight_records()) copy a slot, its state first
// (acquire), and keep the copy only when its id was the same, and not 0,
// before and after.
#pragma once

#include "flight/clock.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace ddp::detail::flight {

// One cache line per record.
struct alignas(64) Slot {
  std::atomic<uint64_t> id{0};  // record number + 1; 0 while written
  std::atomic<uint64_t> seq{0};
  std::atomic<int64_t> count{0};
  std::atomic<int64_t> issued_ticks{0};
  std::atomic<int64_t> started_ticks{0};
  std::atomic<int64_t> ended_ns{0};
  std::atomic<int32_t> root{-1};
  std::atomic<int32_t> bucket{-1};
  std::atomic<int16_t> group{0};
  std::atomic<uint8_t> kind{0};   // Issue::kind's code
  std::atomic<int8_t> op{-1};     // Issue::op's code; -1: none
  std::atomic<int8_t> dtype{-1};  // c10::ScalarType; -1: none
  std::atomic<uint8_t> state{0};  // ddp::FlightState
};
static_assert(sizeof(Slot) == 64, "a record is one cache line");

// A consistent copy of one slot.
struct RecordCopy {
  uint64_t id, seq;
  int64_t count, issued_ticks, started_ticks, ended_ns;
  int32_t root, bucket;
  int16_t group;
  uint8_t kind;
  int8_t op, dtype;
  uint8_t state;
};

struct GroupEntry {
  char name[64];
  char backend[32];
  int32_t rank;
  int32_t size;
  std::atomic<bool> ready{false};  // the fields above are written
};

constexpr int kMaxGroups = 256;

struct Recorder {
  // $DDP_FLIGHT_RECORDER_SIZE rounded up to a power of two (a mask, not a
  // division, finds a slot); 0: recording is off.
  uint64_t capacity = 0;
  std::unique_ptr<Slot[]> slots;
  Slot& slot(uint64_t index) { return slots[index & (capacity - 1)]; }
  const Slot& slot(uint64_t index) const { return slots[index & (capacity - 1)]; }
  std::atomic<uint64_t> next{0};  // records claimed so far
  GroupEntry groups[kMaxGroups];
  std::atomic<int> group_count{0};
  // Ticks and steady nanoseconds read together when the recorder was made:
  // with a second such pair read later, ticks turn into nanoseconds.
  int64_t origin_ticks = 0;
  int64_t origin_ns = 0;
  char dir[4096] = {};  // $DDP_FLIGHT_RECORDER_DIR; "" when unset
  char host[256] = {};
  std::atomic<int> rank{-1};  // names the dump file; -1: unknown (pid<P>)
  std::atomic<bool> failure_dumped{false};
};

// The process's recorder, made on first use; never destroyed (a signal
// handler may dump during exit).
Recorder& recorder();

// `ticks` as steady nanoseconds, from the recorder's origin pair and a
// second pair read now; 0 stays 0.
int64_t ticks_to_ns(const Recorder& r, int64_t ticks, int64_t now_ticks, int64_t now_ns);

// Copies slot `index` into `out`; false when it holds no complete record.
// Signal-safe.
bool read_slot(const Recorder& r, uint64_t index, RecordCopy& out);

// Calls `visit(const RecordCopy&)` on each complete record the ring holds,
// oldest first, of the groups [0, groups); stops at the first non-zero
// value `visit` returns and returns it (0 when it visited them all).
// Signal-safe when `visit` is.
template <typename Visit>
int for_each_record(const Recorder& r, int groups, Visit&& visit) {
  if (r.capacity == 0) return 0;
  const uint64_t end = r.next.load(std::memory_order_acquire);
  const uint64_t begin = end > r.capacity ? end - r.capacity : 0;
  for (uint64_t i = begin; i < end; ++i) {
    RecordCopy c;
    if (!read_slot(r, i, c) || c.group < 0 || c.group >= groups) continue;
    if (int stop = visit(c)) return stop;
  }
  return 0;
}

// How a record's fields are written: "allreduce"; "SUM", or "-" for none;
// libtorch's dtype name ("Float"), or "-" for none. Signal-safe.
const char* kind_name(uint8_t kind);
const char* op_name(int8_t op);
const char* dtype_name(int8_t dtype);

// Room for a dump's path: the directory, '/', the file's name.
constexpr size_t kPathSize = sizeof(Recorder::dir) + 256;

// Writes the dump (src/flight/format.h) into `dir`, first under a temporary
// name, then renamed. Signal-safe: no allocation, no locks, no stdio.
// Returns 0 or the errno of the step that failed; `path` receives the
// file's path either way.
int write_dump(const Recorder& r, const char* dir, const char* reason, char* path,
               size_t path_size);

// SIGTERM and SIGABRT dump `r` to r.dir, then take their course (the
// handler that was there before, or the default). Called once, when r.dir
// is set, after `r` is made.
void install_signal_handlers(Recorder* r);

}  // namespace ddp::detail::flight
