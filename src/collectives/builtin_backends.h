// The backends built into this library, each defined in its own folder under
// src/collectives/. A new backend adds its entry function here and to the
// list in registry.cpp; nothing above the collective layer changes.
#pragma once

#include <ddp/backend.h>

namespace ddp::detail {

Backend gloo_backend();          // collectives/gloo/backend.cpp
Backend shm_backend();           // collectives/shm/backend.cpp
Backend hierarchical_backend();  // collectives/hierarchical/backend.cpp
Backend auto_backend();          // collectives/hierarchical/backend.cpp
#ifdef DDP_WITH_MPI
Backend mpi_backend();           // collectives/mpi/backend.cpp
#endif

}  // namespace ddp::detail
