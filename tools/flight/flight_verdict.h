// What the dumps of a job say happened: which rank stopped where and which
// collective the others were waiting in, or which ranks disagreed on a
// collective. Plain C++, no libtorch.
#pragma once

#include "flight_dump.h"

#include <string>
#include <vector>

namespace ddp::flight {

// One line, e.g. "rank 1 left no dump (killed, or stopped: SIGKILL and
// SIGSTOP leave none) while ranks 0, 2 were in allreduce #12 (SUM, Float,
// 4096 elements) of group generation1, started 5.0 s before their dumps".
//
// Each group is judged on its own, from the ranks that dumped: first a
// collective the ranks disagree on (the first sequence number whose kind,
// op, dtype, count or root differ; the minority named when there is one),
// then a rank with no dump, then ranks that issued fewer collectives than
// the others, then a collective every rank issued and none completed. The
// worst group's finding is the verdict.
std::string flight_verdict(const std::vector<FlightDump>& dumps);

// One line per dump: its process, host, reason, and its last collective of
// each group.
std::vector<std::string> flight_summary(const std::vector<FlightDump>& dumps);

}  // namespace ddp::flight
