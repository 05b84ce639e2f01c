// The MPI library as a process-wide resource: initialised once (by ddp or by
// the program), with the thread level ddp needs, finalized at exit when ddp
// initialised it; and the mapping of ddp's dtypes and ops onto MPI's.
#pragma once

#include <ddp/backend.h>
#include <ddp/process_group.h>

#include <c10/core/ScalarType.h>
#include <mpi.h>

#include <string>

namespace ddp::detail::mpi {

// Initialises MPI unless the program has (MPI_Init_thread asking for
// MPI_THREAD_MULTIPLE), checks the granted thread level and that this world
// is the launcher's (not a singleton under ddprun). Thread-safe, idempotent.
// InvalidArgument says what is wrong and what to do.
void ensure_initialized();

// Rank and size in MPI_COMM_WORLD (initialises MPI if needed).
BackendWorld world();

// MPI's text for an error code.
std::string error_string(int code);

// The MPI datatype carrying `dtype` (2-byte MPI_UINT16_T for Half and
// BFloat16, which MPI lacks).
MPI_Datatype datatype(at::ScalarType dtype);

// The MPI op reducing `dtype` by `op` (AVG as SUM: the caller divides).
// Half and BFloat16 use ops defined by ddp on its own kernels.
MPI_Op reduce_op(at::ScalarType dtype, ReduceOp op);

// Brackets a running collective (see finalize_at_exit in runtime.cpp):
// MPI is not finalized under a collective still running.
void collective_started();
void collective_ended();
// A timed-out collective still owns MPI state: never finalize.
void collective_abandoned();

}  // namespace ddp::detail::mpi
