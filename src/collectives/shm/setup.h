// Setting up a group's segment through the rendezvous store.
#pragma once

#include "collectives/shm/segment.h"

#include <ddp/backends/shm.h>
#include <ddp/errors.h>
#include <ddp/store.h>

#include <string>

namespace ddp::detail::shm {

struct Attached {
  Segment segment;
  // Whether every rank runs in this process's PID namespace (so that their
  // process ids can be checked for liveness).
  bool same_pid_namespace = true;
};

// Every rank publishes its host identity and process id; when all share this
// host, rank 0 creates a segment under a fresh random name and publishes the
// name; every rank maps it and records its pid there; the rank that makes the
// attach count reach `size` unlinks it. Returns once all ranks have mapped it.
// `context` is this rank's in errors (ProcessGroup::error_context()).
Attached attach(const StorePtr& store, int rank, int size, const ShmOptions& options,
                const ErrorContext& context);

}  // namespace ddp::detail::shm
