// GlooProcessGroup, the public class: argument checks and options here in
// libddp, every collective in the Gloo module's engine (engine.h), which is
// loaded on the first group (module.h).
#include <ddp/backends/gloo.h>

#include <ddp/errors.h>

#include "collectives/cpu_tensors.h"
#include "collectives/gloo/engine.h"
#include "collectives/gloo/module.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace ddp {

class GlooProcessGroup::Impl {
 public:
  Impl(GlooOptions options, std::unique_ptr<detail::GlooEngine> engine)
      : options(std::move(options)), engine(std::move(engine)) {}
  const GlooOptions options;
  const std::unique_ptr<detail::GlooEngine> engine;
};

GlooProcessGroup::GlooProcessGroup(StorePtr store, int rank, int size, GlooOptions options)
    : ProcessGroup(rank, size, options.timeout()) {
  if (options.threads() < 1) {
    throw InvalidArgument("GlooOptions::threads must be >= 1, got " +
                          std::to_string(options.threads()));
  }
  const auto& module = detail::gloo_module(error_context());
  detail::GlooEngineSetup setup{std::move(store), rank, size, error_context(), options};
  std::unique_ptr<detail::GlooEngine> engine(module.create_engine(setup));
  impl_ = std::make_unique<Impl>(std::move(options), std::move(engine));
}

GlooProcessGroup::~GlooProcessGroup() = default;

const GlooOptions& GlooProcessGroup::options() const { return impl_->options; }

std::string GlooProcessGroup::unsupported_reason(const at::Tensor& tensor) const {
  return detail::cpu_tensor_unsupported_reason(tensor, "gloo");
}

WorkPtr GlooProcessGroup::do_allreduce(at::Tensor tensor, ReduceOp op) {
  return impl_->engine->allreduce(std::move(tensor), op);
}

WorkPtr GlooProcessGroup::do_allreduce_coalesced(std::vector<at::Tensor> tensors, ReduceOp op) {
  return impl_->engine->allreduce_coalesced(std::move(tensors), op);
}

WorkPtr GlooProcessGroup::do_broadcast(at::Tensor tensor, int root) {
  return impl_->engine->broadcast(std::move(tensor), root);
}

WorkPtr GlooProcessGroup::do_allgather(std::vector<at::Tensor> outputs, at::Tensor input) {
  return impl_->engine->allgather(std::move(outputs), std::move(input));
}

WorkPtr GlooProcessGroup::do_reduce_scatter(at::Tensor output, std::vector<at::Tensor> inputs,
                                            ReduceOp op) {
  return impl_->engine->reduce_scatter(std::move(output), std::move(inputs), op);
}

WorkPtr GlooProcessGroup::do_barrier() { return impl_->engine->barrier(); }

bool GlooProcessGroup::reads_inputs_on_queue() const { return true; }

}  // namespace ddp
