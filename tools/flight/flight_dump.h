// Reading flight-recorder dumps (src/flight/format.h) back: what ddp-flight
// and ddprun analyse. Plain C++, no libtorch.
#pragma once

#include <ddp/flight_recorder.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ddp::flight {

// One process's dump.
struct FlightDump {
  std::string path;
  std::string process;  // "rank3", "pid123"
  int rank = -1;        // -1: unknown
  int pid = 0;
  std::string host;
  std::string reason;   // why it was written
  int64_t dumped_ns = 0;
  uint64_t capacity = 0;  // the ring's size: a dump that holds as many records may have lost older ones
  struct Group {
    std::string name, backend;
    int rank = 0, size = 0;
  };
  std::vector<Group> groups;
  std::vector<FlightRecord> records;  // oldest first
};

// Whether a file of this name is a dump (it ends with ".flight").
bool is_flight_dump(const std::string& name);

// Reads one dump. Throws std::runtime_error naming the file and the line
// that is not what the format says.
FlightDump read_flight_dump(const std::string& path);

// Reads every *.flight file in `dir`, in name order. A dump that cannot be
// read is left out, with a line saying why in `problems` (when given).
// Throws std::runtime_error when the directory cannot be read.
std::vector<FlightDump> read_flight_dumps(const std::string& dir,
                                          std::vector<std::string>* problems = nullptr);

}  // namespace ddp::flight
