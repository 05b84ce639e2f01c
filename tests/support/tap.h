// A minimal test reporter for programs run once per rank: "ok - ..." and
// "not ok - ..." lines (TAP style), and the exit status. Only for the two
// programs whose verdict is in those lines rather than in their exit
// status (mpi_sweep's --timeout and --kill end without MPI_Finalize) or that
// run only on a GPU (cuda_collectives_test); the other per-rank programs
// are GoogleTest (rank_gtest.h), and the shell tests' TAP is tap.sh.
#pragma once

#include <iostream>
#include <string>

namespace ddp::testing {

class Tap {
 public:
  explicit Tap(int rank) : rank_(rank) {}
  void pass(const std::string& what) { std::cout << "ok - " << what << std::endl; }
  void fail(const std::string& what) {
    ++failures_;
    std::cout << "not ok - rank " << rank_ << ": " << what << std::endl;
  }
  void check(bool ok, const std::string& what, const std::string& detail = "") {
    ok ? pass(what) : fail(what + (detail.empty() ? "" : ": " + detail));
  }
  int finish() const {
    std::cout << (failures_ ? "FAILED: " + std::to_string(failures_) + " check(s)"
                            : "all checks passed")
              << std::endl;
    return failures_ ? 1 : 0;
  }

 private:
  int rank_;
  int failures_ = 0;
};

}  // namespace ddp::testing
