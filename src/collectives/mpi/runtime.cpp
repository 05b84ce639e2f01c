#include "collectives/mpi/runtime.h"

#include "base/env.h"
#include "base/mutex.h"
#include "collectives/reduce_kernels.h"

#include <ddp/errors.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace ddp::detail::mpi {
namespace {

Mutex init_mutex;
bool checked DDP_GUARDED_BY(init_mutex) = false;  // ensure_initialized succeeded once
std::atomic<int> running{0};
std::atomic<bool> abandoned{false};

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

// Registered with atexit when ddp initialised MPI. Groups still alive then
// (the default group is a static, destroyed after this runs) skip
// MPI_Comm_free once MPI is finalized. A collective still running, or one
// abandoned after a timeout, could make MPI_Finalize wait forever: then MPI
// is left as it is and the launcher reports the exit.
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (abandoned.load() || running.load() > 0) {
    std::fprintf(stderr,
                 "ddp: not finalizing MPI at exit: a collective is still running "
                 "(timed out or not waited for)\n");
    return;
  }
  MPI_Finalize();
}

// Launched by ddprun or torchrun (RANK/WORLD_SIZE) for more than one rank,
// while MPI sees a world of `mpi_size`: Open MPI started as a singleton.
void check_not_singleton(int mpi_size) {
  const long world_size = env_int("WORLD_SIZE", 1, 1L << 20).value_or(1);
  if (!env_string("RANK") || world_size <= 1 || mpi_size == world_size) return;
  throw InvalidArgument(ErrorContext{static_cast<int>(env_int("RANK", 0, 1L << 20).value_or(-1)),
                                     0, "", "", {}},
                        "the mpi backend found WORLD_SIZE=" + std::to_string(world_size) +
                            " (ddprun/torchrun) but MPI sees " + std::to_string(mpi_size) +
                            " rank(s): MPI processes must be started by an MPI launcher. "
                            "Launch with `mpirun -np " +
                            std::to_string(world_size) +
                            " <program>` (or srun), or keep ddprun and use DDP_BACKEND=gloo "
                            "(or, for MPI across hosts in the hierarchical group, unset "
                            "DDP_CROSS_BACKEND).");
}

// Open MPI's nonblocking allreduce picks a binomial tree for fewer than 4
// ranks or small messages, measured 1.3-4x slower than its blocking
// allreduce here; Rabenseifner's reduce-scatter + allgather (algorithm 3)
// matches it. Set unless the user chose (OMPI_MCA_... in the environment).
void tune_open_mpi() {
  if (std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm")) return;
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return;
  int index = 0;
  if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) == MPI_SUCCESS) {
    MPI_T_cvar_handle handle;
    int count = 0;
    if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
      int current = 0;
      if (MPI_T_cvar_read(handle, &current) == MPI_SUCCESS && current == 0) {
        const int rabenseifner = 3;
        MPI_T_cvar_write(handle, &rabenseifner);
      }
      MPI_T_cvar_handle_free(&handle);
    }
  }
  MPI_T_finalize();
}

template <at::ScalarType D, ReduceOp O>
void user_op(void* in, void* inout, int* len, MPI_Datatype*) {
  static const ReduceKernel kernel = reduce_kernel(D, O);
  kernel(inout, in, inout, static_cast<size_t>(*len));
}

template <at::ScalarType D>
MPI_Op half_op(ReduceOp op) {
  auto make = [](MPI_User_function* fn) {
    MPI_Op made;
    MPI_Op_create(fn, /*commute=*/1, &made);
    return made;
  };
  // Created once, after MPI_Init (ensure_initialized runs before any group).
  static const MPI_Op sum = make(&user_op<D, ReduceOp::SUM>);
  static const MPI_Op min = make(&user_op<D, ReduceOp::MIN>);
  static const MPI_Op max = make(&user_op<D, ReduceOp::MAX>);
  static const MPI_Op product = make(&user_op<D, ReduceOp::PRODUCT>);
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG:
      return sum;
    case ReduceOp::MIN:
      return min;
    case ReduceOp::MAX:
      return max;
    case ReduceOp::PRODUCT:
      return product;
  }
  throw std::logic_error("ddp: unknown ReduceOp");
}

}  // namespace

void ensure_initialized() {
  MutexLock lock(init_mutex);
  if (checked) return;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    throw InvalidArgument("the mpi backend cannot start: MPI is already finalized");
  }
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    // Refuse before MPI_Init: a singleton start would only make it worse.
    if (!std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("PMIX_RANK") &&
        !std::getenv("PMI_RANK")) {
      check_not_singleton(1);
    }
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      throw CommunicationError("MPI_Init_thread failed; see MPI's message above");
    }
    std::atexit(finalize_at_exit);
    tune_open_mpi();
  } else {
    MPI_Query_thread(&provided);
    tune_open_mpi();
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    throw InvalidArgument(
        std::string("the mpi backend requires MPI_THREAD_MULTIPLE (each group calls MPI "
                    "from its own worker thread) but MPI granted ") +
        thread_level_name(provided) +
        (initialized ? ". Initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...), "
                       "or let ddp initialise it."
                     : ". Use an MPI library built with thread support (Open MPI: "
                       "--enable-mpi-thread-multiple)."));
  }
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  check_not_singleton(size);
  checked = true;
}

BackendWorld world() {
  ensure_initialized();
  BackendWorld w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.world_size);
  return w;
}

std::string error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return "MPI error code " + std::to_string(code);
  }
  return std::string(text, static_cast<size_t>(length));
}

MPI_Datatype datatype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return MPI_FLOAT;
    case at::kDouble:
      return MPI_DOUBLE;
    case at::kHalf:
    case at::kBFloat16:
      return MPI_UINT16_T;
    case at::kInt:
      return MPI_INT32_T;
    case at::kLong:
      return MPI_INT64_T;
    case at::kByte:
      return MPI_UINT8_T;
    default:
      break;
  }
  throw InvalidArgument(std::string("the mpi backend has no datatype for ") + c10::toString(dtype));
}

MPI_Op reduce_op(at::ScalarType dtype, ReduceOp op) {
  if (dtype == at::kHalf) return half_op<at::kHalf>(op);
  if (dtype == at::kBFloat16) return half_op<at::kBFloat16>(op);
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG:
      return MPI_SUM;
    case ReduceOp::MIN:
      return MPI_MIN;
    case ReduceOp::MAX:
      return MPI_MAX;
    case ReduceOp::PRODUCT:
      return MPI_PROD;
  }
  throw std::logic_error("ddp: unknown ReduceOp");
}

void collective_started() { running.fetch_add(1); }
void collective_ended() { running.fetch_sub(1); }
void collective_abandoned() { abandoned.store(true); }

}  // namespace ddp::detail::mpi
