// The registry's entry for Gloo: a GlooProcessGroup on the rendezvous store,
// bound where the master is reachable from unless told otherwise.
#include <ddp/backends/gloo.h>

#include <ddp/errors.h>

#include "collectives/builtin_backends.h"
#include "collectives/gloo/network.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace ddp {

namespace detail {
namespace {

GlooOptions gloo_options_for(const BackendSetup& setup) {
  auto options = options_for<GlooOptions>(setup, "gloo", "GlooOptions");
  options.timeout(setup.timeout);
  if (options.interface().empty() && options.hostname().empty() &&
      socket_interface_from_env().empty()) {
    options.hostname(default_bind_host(setup.master_host));
  }
  return options;
}

}  // namespace

Backend gloo_backend() {
  Backend b;
  b.name = "gloo";
  b.summary = "TCP through Gloo, between any hosts";
  b.needs_store = true;
  b.create = [](const BackendSetup& setup) -> ProcessGroupPtr {
    return std::make_shared<GlooProcessGroup>(setup.store, setup.rank, setup.world_size,
                                              gloo_options_for(setup));
  };
  return b;
}

}  // namespace detail
}  // namespace ddp
