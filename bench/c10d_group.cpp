#include "c10d_group.h"

#include <ddp/backends/gloo.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <cstdlib>

namespace ddp_bench {
namespace {

std::string interface_from_env() {
  for (const char* var : {"DDP_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    if (const char* v = std::getenv(var); v && *v) return v;
  }
  return "";
}

}  // namespace

std::string c10d_bind_description(const ddp::InitOptions& init) {
  const std::string iface = interface_from_env();
  if (!iface.empty()) return "interface " + iface;
  return ddp::gloo_default_hostname(ddp::rendezvous_master_host(init));
}

c10::intrusive_ptr<c10d::ProcessGroupGloo> make_c10d_gloo(const ddp::StorePtr& store,
                                                          const ddp::InitOptions& init, int threads,
                                                          const std::string& prefix) {
  const std::string iface = interface_from_env();
  const std::string host = ddp::gloo_default_hostname(ddp::rendezvous_master_host(init));
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->threads = threads;
  opts->devices.push_back(!iface.empty()  ? c10d::ProcessGroupGloo::createDeviceForInterface(iface)
                          : !host.empty() ? c10d::ProcessGroupGloo::createDeviceForHostname(host)
                                          : c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(
      c10::make_intrusive<c10d::PrefixStore>(prefix, store), init.rank(), init.world_size(), opts);
}

}  // namespace ddp_bench
