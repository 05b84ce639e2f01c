#include "mpi_raw.h"

#include <ddp/backend.h>

#include <stdexcept>
#include <string>

#ifdef DDP_WITH_MPI
#include <mpi.h>
#endif

namespace ddp_bench {

#ifdef DDP_WITH_MPI

struct RawMpiAllreduce::State {
  MPI_Comm comm = MPI_COMM_NULL;
};

RawMpiAllreduce::RawMpiAllreduce() : state_(std::make_unique<State>()) {
  ddp::find_backend("mpi").world();  // initialises MPI as ddp's backend does
  MPI_Comm_dup(MPI_COMM_WORLD, &state_->comm);
  MPI_Comm_set_errhandler(state_->comm, MPI_ERRORS_RETURN);
}

RawMpiAllreduce::~RawMpiAllreduce() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&state_->comm);
}

namespace {

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw std::runtime_error(std::string("mpi-raw: ") + call + " failed: " +
                           std::string(text, length));
}

}  // namespace

void RawMpiAllreduce::allreduce(at::Tensor& t) {
  check(MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), static_cast<int>(t.numel()), MPI_FLOAT,
                      MPI_SUM, state_->comm),
        "MPI_Allreduce");
}

void RawMpiAllreduce::allreduce_polled(at::Tensor& t) {
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), static_cast<int>(t.numel()), MPI_FLOAT,
                       MPI_SUM, state_->comm, &request),
        "MPI_Iallreduce");
  for (int done = 0; !done;) check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
}

#else

struct RawMpiAllreduce::State {};

RawMpiAllreduce::RawMpiAllreduce() {
  throw std::runtime_error("mpi-raw: this build has no MPI (install libopenmpi-dev, rebuild)");
}
RawMpiAllreduce::~RawMpiAllreduce() = default;
void RawMpiAllreduce::allreduce(at::Tensor&) {}
void RawMpiAllreduce::allreduce_polled(at::Tensor&) {}

#endif

}  // namespace ddp_bench
