// The boundary between libddp and its Gloo module, libddp_gloo.so: every call
// into Gloo is in the module, which libddp loads so that the module's Gloo
// references bind to the libgloo it was linked with, never to another Gloo in
// the process (libtorch's own copy; see module.cpp and docs/architecture.md,
// "Gloo next to libtorch's own Gloo"). libddp sees only this interface.
// Both sides are built together from one tree: the interface is C++, and the
// module's build id must equal libddp's (checked at load).
#pragma once

#include <ddp/backends/gloo.h>
#include <ddp/errors.h>

#include <chrono>
#include <string>
#include <vector>

namespace ddp::detail {

// What a GlooProcessGroup hands the module to connect one rank.
struct GlooEngineSetup {
  StorePtr store;
  int rank = 0;
  int size = 1;
  ErrorContext context;  // rank 1 of 2 [gloo]: the context of this process's errors
  GlooOptions options;
};

// One connected rank of a Gloo group: the collectives of GlooProcessGroup,
// arguments already validated.
class GlooEngine {
 public:
  virtual ~GlooEngine() = default;
  virtual WorkPtr allreduce(at::Tensor tensor, ReduceOp op) = 0;
  virtual WorkPtr allreduce_coalesced(std::vector<at::Tensor> tensors, ReduceOp op) = 0;
  virtual WorkPtr broadcast(at::Tensor tensor, int root) = 0;
  virtual WorkPtr allgather(std::vector<at::Tensor> outputs, at::Tensor input) = 0;
  virtual WorkPtr reduce_scatter(at::Tensor output, std::vector<at::Tensor> inputs,
                                 ReduceOp op) = 0;
  virtual WorkPtr barrier() = 0;
};

}  // namespace ddp::detail

// The module's entry points, found by name (dlsym).
extern "C" {
// Connects this rank to the others (GlooProcessGroup's contract: a
// rendezvous; throws ddp's errors). The caller owns the result.
ddp::detail::GlooEngine* ddp_gloo_create_engine(const ddp::detail::GlooEngineSetup& setup);
// "" when the module's calls into Gloo reach the libgloo it was linked with;
// else which file they reach instead.
const char* ddp_gloo_binding_error();
// The build the module comes from (DDP_GLOO_BUILD_ID): must equal libddp's.
const char* ddp_gloo_build_id();
}
