// libtorch's own c10d::ProcessGroupGloo, the reference implementation of the
// benchmarks, set up on ddp's rendezvous store and bound where ddp's Gloo
// group binds, so that both implementations use the same store, the same
// interface and the same number of worker threads.
//
//   ddp::InitOptions init = ddp_bench::init_options(g);
//   ddp::StorePtr store = ddp::rendezvous(init);
//   auto ours = ddp::new_process_group(store, init.rank(), init.world_size(), init);
//   auto theirs = ddp_bench::make_c10d_gloo(store, init, g);
//
// Include only where c10d's headers are wanted (needs USE_C10D_GLOO, which
// bench/CMakeLists.txt defines).
#pragma once

#include <ddp/init.h>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <string>

namespace ddp_bench {

// Where a c10d group made by make_c10d_gloo binds: "interface X" for
// $DDP_SOCKET_IFNAME (else $GLOO_SOCKET_IFNAME), else where ddp's Gloo
// binds by default (ddp::detail::default_bind_host: the local address that
// routes to the rendezvous master).
std::string c10d_bind_description(const ddp::InitOptions& init);

// A c10d::ProcessGroupGloo with `threads` worker threads on `store` under
// `prefix` (a PrefixStore, so that it does not meet ddp's own keys), bound as
// c10d_bind_description says. Collective: every rank must call it.
c10::intrusive_ptr<c10d::ProcessGroupGloo> make_c10d_gloo(const ddp::StorePtr& store,
                                                          const ddp::InitOptions& init, int threads,
                                                          const std::string& prefix = "bench/c10d");

}  // namespace ddp_bench
