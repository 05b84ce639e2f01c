// Flight recorder: the last collectives of each rank, kept in memory and
// written out when something goes wrong, so that one tool can say which rank
// stopped where (PyTorch's flight recorder, for every backend).
//
// Contract
// - Every group that init_process_group or new_process_group returns records
//   each collective issued on it: its number in the group (from 0), the
//   operation, reduce op, dtype, element count, root, the DDP bucket it
//   carries, and its state (queued, started, completed, failed) with the time
//   of each. All groups share one ring of the last $DDP_FLIGHT_RECORDER_SIZE
//   collectives (Default: 4096; rounded up to a power of two; 0 turns
//   recording off). Recording takes no lock and allocates nothing (but
//   where a composed group hands back a Work of one of its parts, as
//   DDP_DEBUG=detail's wrapper does: that record rides on a callback).
// - With $DDP_FLIGHT_RECORDER_DIR set, the ring is written there as
//   <process>.flight (rank<R>.flight, R = $RANK or the rank in the first
//   group) when a recorded collective fails (the first failure of the
//   process), when Work::wait times out on one, when DDP finds that the ranks
//   issued different collectives, and on SIGTERM or SIGABRT (the launcher
//   stopping the job, an abort; the signal then takes its usual course). An
//   automatic dump that cannot be written says so in one line on stderr and
//   never replaces the error that caused it.
// - `ddp-flight DIR` reads every rank's dump and says in one line which rank
//   stopped where and which collective the others were waiting in, or which
//   ranks disagreed on a collective; `ddprun --flight-recorder DIR` sets the
//   variable for every rank and prints that line after a failed job.
// - Thread-safe. Plain C++: no libtorch in this header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

// A collective's state, in the order it goes through them.
enum class FlightState : uint8_t { QUEUED, STARTED, COMPLETED, FAILED };
// "queued", "started", "completed", "failed"
inline const char* to_string(FlightState state) {
  switch (state) {
    case FlightState::QUEUED:
      return "queued";
    case FlightState::STARTED:
      return "started";
    case FlightState::COMPLETED:
      return "completed";
    case FlightState::FAILED:
      return "failed";
  }
  return "?";
}

struct FlightRecord {
  uint64_t seq = 0;        // its number among its group's collectives, from 0
                           // (as "allreduce #4" in a backend's errors)
  std::string group;       // the group's name, the same on every rank
  int group_rank = 0;      // this process's rank in that group
  int group_size = 0;
  std::string backend;     // "shm", "gloo", ...
  std::string kind;        // "allreduce", "broadcast", ... (to_string(OpKind))
  std::string op = "-";    // "SUM", ...; "-" where there is none
  std::string dtype = "-"; // libtorch's name, e.g. "Float"; "-" for a barrier
  int64_t count = 0;       // elements (all tensors, for a coalesced allreduce)
  int root = -1;           // broadcast's root; -1 elsewhere
  int bucket = -1;         // the DDP bucket it reduces; -1 when not a bucket
  FlightState state = FlightState::QUEUED;
  int64_t issued_ns = 0;   // steady clock (CLOCK_MONOTONIC); 0 = not yet
  int64_t started_ns = 0;
  int64_t ended_ns = 0;    // completed or failed
};

// What the ring holds now, oldest first (empty when recording is off).
std::vector<FlightRecord> flight_records();

// Writes the ring to `dir` (Default: $DDP_FLIGHT_RECORDER_DIR) with `reason`
// on its reason line, and returns the file's path. Throws ddp::Error naming
// the path and the system's reason when it cannot be written, and
// InvalidArgument when no directory is given and none is set.
std::string dump_flight_recorder(const std::string& reason = "on demand",
                                 const std::string& dir = "");

}  // namespace ddp
