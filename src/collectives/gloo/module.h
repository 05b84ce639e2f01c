// Loading the Gloo module (libddp_gloo.so, beside libddp) so that its Gloo
// stays its own: see module.cpp and docs/architecture.md ("Gloo next to
// libtorch's own Gloo").
#pragma once

#include "collectives/gloo/engine.h"

#include <ddp/errors.h>

#include <string>

namespace ddp::detail {

struct GlooModule {
  decltype(&ddp_gloo_create_engine) create_engine = nullptr;
};

// The loaded module (loaded once per process, never unloaded). Throws
// InvalidArgument in `context` (the calling rank's), saying why the Gloo
// backend cannot be used in this process, and the backends that need no Gloo.
const GlooModule& gloo_module(const ErrorContext& context);

// Where libddp looks for the module: the directory libddp was loaded from.
std::string gloo_module_path();

}  // namespace ddp::detail
