// The floor for ddp's MPI backend in `ddp_bench collectives`: MPI_Allreduce
// called directly, blocking, on a communicator of its own (a duplicate of
// MPI_COMM_WORLD). MPI is initialised through ddp's MPI backend (so with the
// same thread level and settings, and finalized by ddp at exit).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

namespace ddp_bench {

class RawMpiAllreduce {
 public:
  // Collective over MPI_COMM_WORLD. Throws when this build has no MPI.
  RawMpiAllreduce();
  ~RawMpiAllreduce();
  // allreduce(SUM) of a float32 tensor, in place.
  void allreduce(at::Tensor& t);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ddp_bench
