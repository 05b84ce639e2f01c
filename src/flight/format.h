// The text a flight-recorder dump is written in: the one definition that the
// writer (src/flight/dump.cpp, inside libddp) and the reader (ddp-flight and
// ddprun, tools/flight/) share. Plain C++, no libtorch.
//
// A dump is one file per process, DIR/<process>.flight, where <process> is
// "rank<R>" (R: $RANK, else the process's rank in its first recorded group)
// or "pid<P>" when no rank is known. Lines, each ended by '\n':
//
//   ddp-flight-recorder 1
//   process rank3                  # the file's own name, without .flight
//   rank 3                         # -1 when unknown
//   pid 12345
//   host node-a
//   reason <text to the end of the line>
//   dumped_ns 123456789           # steady clock (CLOCK_MONOTONIC)
//   capacity 4096
//   group <index> <rank> <size> <backend> <name>
//   record <seq> <group index> <kind> <op> <dtype> <count> <root> <bucket>
//          <state> <issued_ns> <started_ns> <ended_ns>   (one line)
//
// Records come oldest first. <op> and <dtype> are "-" where they do not
// apply (a barrier has neither, a broadcast no op); <root> and <bucket> are
// -1 where they do not apply or are unknown; a time is 0 until it happened.
// Names never contain spaces.
#pragma once

#include <ddp/flight_recorder.h>

#include <cstdint>

namespace ddp::flight_format {

inline constexpr const char* kMagic = "ddp-flight-recorder 1";
inline constexpr const char* kSuffix = ".flight";
// States are written with to_string(FlightState) (include/ddp/flight_recorder.h).

}  // namespace ddp::flight_format
