// GoogleTest in programs that a launcher runs once per rank (ddprun, mpirun,
// srun): link the target ddp_rank_gtest_main, and each TEST reaches its
// rank's group and device through this_rank().
//
// Every rank runs the same TESTs in the same order, so their collectives
// pair up. Where a test goes on to issue collectives after a check, the
// check must not return early (EXPECT_*, check(), not ASSERT_*), so that a
// failure on one rank leaves the ranks in step.
//
// The program's arguments: GoogleTest's own (--gtest_filter=...), then
// "--device cpu|cuda" (default cpu; the GPU tests pass cuda). At start each
// rank prints "rank R of N on DEVICE over BACKEND" (the launcher tests
// count those lines), and every failure is printed with the rank that saw it.
#pragma once

#include <ddp/process_group.h>

#include <gtest/gtest.h>
#include <torch/types.h>

#include <string>

namespace ddp::testing {

struct TestRank {
  torch::Device device;
  ProcessGroupPtr group;  // the default group, 60 s timeout on every collective
};

// This process's rank, set up before the first TEST runs.
const TestRank& this_rank();

// A check that says what it checks: fails the running TEST with `what`
// and, when given, `detail` (what was seen). Does not return early.
inline void check(bool ok, const std::string& what, const std::string& detail = "") {
  EXPECT_TRUE(ok) << what << (detail.empty() ? "" : ": " + detail);
}

}  // namespace ddp::testing
