// Six ways to train data-parallel, from dudeperf3ct's blog post on
// implementing data parallelism in PyTorch
// (https://dudeperf3ct.github.io/posts/implement_data_parallelism, code in
// github.com/dudeperf3ct/llm-parallelism-pytorch: simple_ddp, simple_ddp_ga,
// simple_ddp_hook, simple_ddp_async, bucket_ddp_async, pytorch_ddp), written
// plainly in C++ over ddp::ProcessGroup (our Gloo group), for
// `paper_bench variants`:
//
//   simple     after backward, a blocking allreduce(SUM) per parameter
//              gradient, then divide by the world size; every micro-batch
//   simple_ga  the same, but gradients accumulate locally over `accum`
//              micro-batches and are synchronized on the last one only
//   hook_ga    + a hook per parameter that fires when its gradient is fully
//              accumulated during backward and does the blocking allreduce
//              there (sync micro-batches only)
//   async_ga   + the hooks launch asynchronous allreduces; after backward,
//              wait for all of them and divide
//   bucket_ga  + the hooks copy gradients into flat buckets of
//              bucket_cap_mb in hook-firing order and launch an asynchronous
//              allreduce per full bucket; after backward the partial bucket
//              is flushed, all are waited for, copied back and divided.
//              Like the blog's, it assumes every rank fires hooks in the same
//              order (else buckets pair different parameters across ranks and
//              silently corrupt gradients: paper_bench checks the final
//              parameters across ranks)
//   ddp        ddp::DistributedDataParallel, no_sync() on the micro-batches
//              that do not synchronize, the same bucket cap
//
// Every variant records its work into a Timeline (bench/timeline.h):
// "compute" for forward, backward, and its own gradient copies and
// divisions; "comm" for each collective from launch to completion, with
// blocking = true where the training thread waited in the call.
//
// A training loop with any of them (see variants_bench.cpp):
//   variant->prepare(model);                  // broadcast from rank 0
//   for each micro-batch m:
//     if (m % accum == 0) optimizer.zero_grad();
//     bool sync = (m + 1) % accum == 0;       // accum = accumulation_steps()
//     variant->train_step(batch, loss_fn, sync);
//     if (sync) { variant->finish_sync(); optimizer.step(); }
#pragma once

#include "models/models.h"
#include "timeline.h"

#include <ddp/process_group.h>

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ddp_bench {

struct VariantOptions {
  ddp::ProcessGroupPtr group;    // the group to reduce over
  int64_t accum = 2;             // micro-batches per optimizer step (simple: always 1)
  double bucket_cap_mb = 25;     // bucket_ga and ddp
  Timeline* timeline = nullptr;  // where events go (not owned; may be null)
};

using LossFn =
    std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)>;

class DataParallelVariant {
 public:
  explicit DataParallelVariant(VariantOptions options);
  virtual ~DataParallelVariant();
  DataParallelVariant(const DataParallelVariant&) = delete;
  DataParallelVariant& operator=(const DataParallelVariant&) = delete;

  virtual std::string name() const = 0;
  // Micro-batches per optimizer step: gradients accumulate locally over the
  // first accumulation_steps() - 1 of them.
  virtual int64_t accumulation_steps() const { return options_.accum; }

  // Takes the model (trained in place) and makes every rank start from rank
  // 0's parameters: a blocking broadcast per parameter tensor. Collective.
  virtual void prepare(torch::nn::AnyModule model);

  // One micro-batch: forward, loss_fn(output, target) / accumulation_steps(),
  // backward; gradients add up in the parameters' grad(). `sync`: the last
  // micro-batch of the window; after finish_sync() the gradients are
  // averaged over ranks. Records "forward" (with the loss) itself and lets
  // the variant record its backward. Returns the unscaled loss.
  torch::Tensor train_step(const ModelBatch& batch, const LossFn& loss_fn, bool sync);

  // After train_step(..., sync = true): completes this window's
  // communication; the gradients are then averaged. Collective.
  virtual void finish_sync() {}

  // The model's trainable parameters, in parameters() order.
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  const std::vector<std::string>& parameter_names() const { return names_; }

 protected:
  virtual torch::Tensor forward(const torch::Tensor& input, bool sync);
  // Default: loss.backward(), recorded as compute "backward".
  virtual void backward(const torch::Tensor& loss, bool sync);

  void record(const std::string& lane, const std::string& name, Clock::time_point start,
              Clock::time_point end, bool blocking = false);

  VariantOptions options_;
  ddp::ProcessGroup& group_;
  const int world_;
  torch::nn::AnyModule model_;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
};

// "simple", "simple_ga", "hook_ga", "async_ga", "bucket_ga", "ddp".
const std::vector<std::string>& variant_names();
// A new variant by name; std::invalid_argument naming the known ones.
std::unique_ptr<DataParallelVariant> make_variant(const std::string& name, VariantOptions options);

}  // namespace ddp_bench
