// A minimal test reporter for programs run once per rank: "ok - ..." and
// "not ok - ..." lines (TAP style), and the exit status.
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
