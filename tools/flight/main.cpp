// ddp-flight: reads the flight-recorder dumps of a job (one per rank, from
// DDP_FLIGHT_RECORDER_DIR) and says in one line which rank stopped where and
// which collective the others were waiting in, or which ranks disagreed;
// then one line per dump.
//
//   ddp-flight DIR
//
// Exit status: 0 when it could read the dumps, 1 when not, 2 on bad usage.
#include "flight_dump.h"
#include "flight_verdict.h"

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help") {
    std::fprintf(argc == 2 ? stdout : stderr,
                 "usage: ddp-flight DIR\n"
                 "Reads DIR/*.flight (the flight-recorder dumps written under "
                 "DDP_FLIGHT_RECORDER_DIR) and says which rank stopped where.\n");
    return argc == 2 ? 0 : 2;
  }
  try {
    std::vector<std::string> problems;
    const auto dumps = ddp::flight::read_flight_dumps(argv[1], &problems);
    for (const auto& problem : problems) std::fprintf(stderr, "%s\n", problem.c_str());
    std::printf("ddp-flight: %s\n", ddp::flight::flight_verdict(dumps).c_str());
    for (const auto& line : ddp::flight::flight_summary(dumps)) std::printf("  %s\n", line.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
