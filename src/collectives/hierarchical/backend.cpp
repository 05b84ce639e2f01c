// The registry's entries "hierarchical" (always the composition) and "auto"
// (the default: shared memory within one host, the cross-host backend when
// every host has one rank, the composition otherwise).
#include <ddp/backends/gloo.h>
#include <ddp/backends/hierarchical.h>
#include <ddp/backends/shm.h>

#include <ddp/errors.h>

#include "collectives/builtin_backends.h"
#include "collectives/hierarchical/topology.h"
#include "collectives/host_identity.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

namespace ddp::detail {
namespace {

// auto takes HierarchicalOptions, or the options of the part they belong to
// (GlooOptions: across hosts; ShmOptions: within a host), so that a program
// tuning Gloo or shm need not name the backend.
HierarchicalOptions auto_options_for(const BackendSetup& setup) {
  const BackendOptions* given = setup.options.get();
  if (dynamic_cast<const GlooOptions*>(given)) {
    return HierarchicalOptions().cross_backend("gloo").cross_options(setup.options);
  }
  if (dynamic_cast<const ShmOptions*>(given)) {
    return HierarchicalOptions().local_options(setup.options);
  }
  return options_for<HierarchicalOptions>(setup, "auto", "HierarchicalOptions");
}

// `options` with the cross-host backend named ($DDP_CROSS_BACKEND read
// once), and both parts looked up before the hosts are exchanged, so that a
// wrong name is the same error on every rank at once (rank 0 failing inside
// the exchange would take the store away from the others).
HierarchicalOptions checked_parts(HierarchicalOptions options) {
  options.cross_backend(resolve_cross_backend(options));
  find_backend(options.local_backend(), kLocalBackendChosenBy);
  find_backend(options.cross_backend(), kCrossBackendChosenBy);
  return options;
}

std::vector<std::string> hosts(const BackendSetup& setup) {
  return hosts_of_ranks(setup.store, "hosts/", setup.rank, setup.world_size, setup.timeout);
}

// A group of `name` (which `chosen_by` named) on the same ranks, under its
// own store prefix.
ProcessGroupPtr plain(const BackendSetup& setup, const std::string& name,
                      const BackendOptionsPtr& options, const std::string& chosen_by) {
  BackendSetup sub = setup;
  sub.store = c10::make_intrusive<c10d::PrefixStore>(name, setup.store);
  sub.options = options;
  return find_backend(name, chosen_by).create(sub);
}

}  // namespace

Backend hierarchical_backend() {
  Backend b;
  b.name = "hierarchical";
  b.summary = "shared memory within each host, an inter-host backend across (always)";
  b.create = [](const BackendSetup& setup) -> ProcessGroupPtr {
    auto options = checked_parts(
        options_for<HierarchicalOptions>(setup, "hierarchical", "HierarchicalOptions"));
    return std::make_shared<HierarchicalProcessGroup>(setup, hosts(setup), options);
  };
  return b;
}

Backend auto_backend() {
  Backend b;
  b.name = "auto";
  b.summary = "shm within one host, gloo across hosts, hierarchical when both (the default)";
  b.create = [](const BackendSetup& setup) -> ProcessGroupPtr {
    HierarchicalOptions options = checked_parts(auto_options_for(setup));
    auto labels = hosts(setup);
    Topology t = topology_of(labels, setup.rank);
    if (t.host_count == 1) {
      return plain(setup, options.local_backend(), options.local_options(),
                   kLocalBackendChosenBy);
    }
    if (t.uniform && t.local_size == 1) {
      return plain(setup, options.cross_backend(), options.cross_options(),
                   kCrossBackendChosenBy);
    }
    return std::make_shared<HierarchicalProcessGroup>(setup, labels, options);
  };
  return b;
}

}  // namespace ddp::detail
