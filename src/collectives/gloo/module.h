// Loading the Gloo module (libddp_gloo.so, beside libddp) so that its Gloo
// stays its own: see module.cpp and docs/architecture.md ("Gloo next to
// libtorch's own Gloo").
#pragma once

#include "collectives/gloo/engine.h"

#include <string>

namespace ddp::detail {

struct GlooModule {
  decltype(&ddp_gloo_create_engine) create_engine = nullptr;
};

// The loaded module (loaded once per process, never unloaded). Throws
// InvalidArgument naming `where` (the calling rank), why the Gloo backend
// cannot be used in this process, and the backends that need no Gloo.
const GlooModule& gloo_module(const std::string& where);

// Where libddp looks for the module: the directory libddp was loaded from.
std::string gloo_module_path();

}  // namespace ddp::detail
