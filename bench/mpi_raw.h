// The floor for ddp's MPI backend in `ddp_bench collectives`: MPI_Allreduce
// called directly, blocking, on a communicator of its own (a duplicate of
// MPI_COMM_WORLD) ("mpi-raw"); or MPI_Iallreduce polled with MPI_Test until
// done ("mpi-raw-nb"): the floor of any path that can honour a timeout, as
// ddp's does. MPI is initialised through ddp's MPI backend (so with the
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
  // allreduce(SUM) of a float32 tensor, in place: blocking, or nonblocking
  // and polled.
  void allreduce(at::Tensor& t);
  void allreduce_polled(at::Tensor& t);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ddp_bench
