// main() of the GoogleTest programs run once per rank (support/rank_gtest.h):
// one intra-op thread (the ranks share the cores), the device from
// "--device NAME", the default group from the launcher's environment. A
// group that cannot be made ends the program (exit 1) with the error and its
// facts (support/error_facts.h), as the srun and mpi tests read them.
#include "support/error_facts.h"
#include "support/rank_gtest.h"

#include <ddp/device.h>
#include <ddp/init.h>

#include <ATen/Parallel.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

namespace ddp::testing {
namespace {

std::optional<TestRank> g_rank;

// "cpu", or "cuda" for this rank's GPU (ddp::local_device(): ranks share
// one GPU when there are fewer GPUs than ranks).
torch::Device device_named(const std::string& name) {
  if (name == "cpu") return torch::kCPU;
  const torch::Device device = ddp::local_device();
  if (name != "cuda" || !device.is_cuda()) {
    // The gpu tests run through tests/gpu/skip_without_gpu.sh, which skips
    // them where there is no GPU: reaching here is a mistake.
    std::cerr << "--device " << name << ": expected cpu, or cuda with a GPU visible" << std::endl;
    std::exit(2);
  }
  return device;
}

// Prints each failed check with the rank that saw it (the ranks' output is
// interleaved by the launcher).
class RankPrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankPrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::cout << "rank " << rank_ << " failed a check: " << result.message() << std::endl;
  }

 private:
  int rank_;
};

}  // namespace

const TestRank& this_rank() { return *g_rank; }

}  // namespace ddp::testing

int main(int argc, char** argv) {
  using namespace ddp::testing;
  ::testing::InitGoogleTest(&argc, argv);  // takes out --gtest_* arguments
  at::set_num_threads(1);
  const torch::Device device =
      device_named(argc > 2 && std::string(argv[1]) == "--device" ? argv[2] : "cpu");
  try {
    g_rank = TestRank{
        device, ddp::init_process_group(ddp::InitOptions().timeout(std::chrono::seconds(60)))};
  } catch (const ddp::Error& e) {
    std::cerr << e.what() << std::endl;
    print_error_facts(std::cerr, e);
    return 1;
  }
  const auto& group = g_rank->group;
  std::cout << "rank " << group->rank() << " of " << group->size() << " on " << device.str()
            << " over " << group->backend_name() << std::endl;
  ::testing::UnitTest& tests = *::testing::UnitTest::GetInstance();
  tests.listeners().Append(new RankPrinter(group->rank()));
  const int status = RUN_ALL_TESTS();
  if (tests.test_to_run_count() == 0) {  // a filter that matches nothing must not pass
    std::cerr << "rank " << group->rank() << ": no test matches --gtest_filter" << std::endl;
    return 1;
  }
  return status;
}
