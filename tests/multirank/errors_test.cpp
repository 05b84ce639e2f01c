// Failures that must be errors, never a crash or a hang: ranks
// that issue collectives of different element counts.
#include "spawn.h"

#include <ddp/ddp.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace ddp::testing {
namespace {

// Gloo enforces equal sizes inside its own I/O thread, where a failure
// aborted the process; it must surface as a CommunicationError on the
// caller's wait. (Other backends are covered in DDP training by the
// per-iteration tally: ddp_equivalence --errors.)
TEST(Errors, GlooDifferentElementCountsAreACommunicationErrorNotACrash) {
  for (int64_t extra : {-1, 1}) {
    spawn(2, [extra](int rank, StorePtr store) {
      auto pg = make_group("gloo", store, rank, 2, std::chrono::seconds(5));
      at::Tensor t = at::ones({1000 + (rank == 1 ? extra : 0)}, at::kFloat);
      try {
        pg->allreduce(t)->wait();
        ADD_FAILURE() << "rank " << rank << ": no error for 1000 vs " << 1000 + extra;
      } catch (const CommunicationError& e) {
        SUCCEED() << e.what();
      }
    });
  }
}

}  // namespace
}  // namespace ddp::testing
