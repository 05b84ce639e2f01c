// ddprun's side of the flight recorder (include/ddp/flight_recorder.h): the
// ranks dump into one directory; ddprun clears it before each start of the
// job and, after a failed one, says what the dumps tell.
#pragma once

#include <string>

namespace ddprun {

// Makes `dir` when missing and removes the dumps (*.flight) of an earlier
// start from it; false with `error` set when it cannot.
bool prepare_flight_dir(const std::string& dir, std::string& error);

// One line: the verdict of the dumps in `dir` (ddp-flight's), or why there
// is none.
std::string flight_report(const std::string& dir);

}  // namespace ddprun
