#include "c10d_group.h"

#include "collectives/gloo/network.h"
#include "rendezvous/master.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

namespace ddp_bench {

std::string c10d_bind_description(const ddp::InitOptions& init) {
  const std::string iface = ddp::detail::socket_interface_from_env();
  if (!iface.empty()) return "interface " + iface;
  return ddp::detail::default_bind_host(ddp::detail::master_host(init));
}

c10::intrusive_ptr<c10d::ProcessGroupGloo> make_c10d_gloo(const ddp::StorePtr& store,
                                                          const ddp::InitOptions& init, int threads,
                                                          const std::string& prefix) {
  const std::string iface = ddp::detail::socket_interface_from_env();
  const std::string host = ddp::detail::default_bind_host(ddp::detail::master_host(init));
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->threads = threads;
  opts->devices.push_back(!iface.empty()  ? c10d::ProcessGroupGloo::createDeviceForInterface(iface)
                          : !host.empty() ? c10d::ProcessGroupGloo::createDeviceForHostname(host)
                                          : c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(
      c10::make_intrusive<c10d::PrefixStore>(prefix, store), init.rank(), init.world_size(), opts);
}

}  // namespace ddp_bench
