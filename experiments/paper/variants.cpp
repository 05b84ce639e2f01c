// The six data-parallel variants (see variants.h), in the order the blog
// builds them up: each class adds one idea to the one before.
#include "variants.h"

#include <ddp/distributed_data_parallel.h>
#include <ddp/grad_ready_hook.h>

#include <optional>
#include <stdexcept>

namespace ddp_bench {

// --- the common part: model, broadcast, forward/backward ---------------------

DataParallelVariant::DataParallelVariant(VariantOptions options)
    : options_(std::move(options)), group_(*options_.group), world_(options_.group->size()) {}

DataParallelVariant::~DataParallelVariant() = default;

void DataParallelVariant::prepare(torch::nn::AnyModule model) {
  model_ = std::move(model);
  for (const auto& item : model_.ptr()->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    params_.push_back(item.value());
    names_.push_back(item.key());
  }
  // The blog's sync_parameters: rank 0's values everywhere.
  torch::NoGradGuard no_grad;
  for (auto& p : params_) group_.broadcast(p.detach(), 0)->wait();
}

torch::Tensor DataParallelVariant::train_step(const ModelBatch& batch, const LossFn& loss_fn,
                                              bool sync) {
  const auto t0 = Clock::now();
  torch::Tensor loss = loss_fn(forward(batch.input, sync), batch.target);
  const auto t1 = Clock::now();
  record("compute", "forward", t0, t1);
  backward(loss / static_cast<double>(accumulation_steps()), sync);
  return loss.detach();
}

torch::Tensor DataParallelVariant::forward(const torch::Tensor& input, bool) {
  return model_.forward(input);
}

void DataParallelVariant::backward(const torch::Tensor& loss, bool) {
  const auto t0 = Clock::now();
  loss.backward();
  record("compute", "backward", t0, Clock::now());
}

void DataParallelVariant::record(const std::string& lane, const std::string& name,
                                 Clock::time_point start, Clock::time_point end, bool blocking) {
  if (options_.timeline) options_.timeline->add(lane, name, start, end, blocking);
}

namespace {

// "24.0 MiB", "4 KiB", for event names.
std::string mib(int64_t bytes) {
  if (bytes < (1 << 20)) return format_fixed(static_cast<double>(bytes) / 1024, 0) + " KiB";
  return format_fixed(static_cast<double>(bytes) / (1 << 20), 1) + " MiB";
}

// --- simple: blocking allreduce per gradient after backward ------------------

class Simple : public DataParallelVariant {
 public:
  using DataParallelVariant::DataParallelVariant;
  std::string name() const override { return "simple"; }
  int64_t accumulation_steps() const override { return 1; }

  // The blog's sync_gradients.
  void finish_sync() override {
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor grad = params_[i].grad();
      if (!grad.defined()) continue;
      const auto t0 = Clock::now();
      group_.allreduce(grad)->wait();
      const auto t1 = Clock::now();
      grad.div_(world_);
      record("comm", "allreduce " + names_[i], t0, t1, /*blocking=*/true);
      record("compute", "average", t1, Clock::now());
    }
  }
};

// --- simple_ga: the same, every accum micro-batches --------------------------

class SimpleGA : public Simple {
 public:
  using Simple::Simple;
  std::string name() const override { return "simple_ga"; }
  int64_t accumulation_steps() const override { return options_.accum; }
};

// --- hooks: run code when a parameter's gradient is fully accumulated --------

// ddp's own GradReadyHook (ddp/grad_ready_hook.h), the Reducer's: it runs
// once per backward, on the autograd thread, after the gradient has been
// added into param.grad().
using ddp::GradReadyHook;

// The hook variants' base: on_grad_ready(i) when parameter i's gradient is
// complete, knowing whether this backward synchronizes.
class Hooked : public DataParallelVariant {
 public:
  using DataParallelVariant::DataParallelVariant;

  void prepare(torch::nn::AnyModule model) override {
    DataParallelVariant::prepare(std::move(model));
    for (size_t i = 0; i < params_.size(); ++i) {
      hooks_.push_back(
          std::make_unique<GradReadyHook>(params_[i], [this, i] { on_grad_ready(i); }));
    }
  }

 protected:
  void backward(const torch::Tensor& loss, bool sync) override {
    syncing_ = sync;  // the blog's should_sync / no_sync()
    DataParallelVariant::backward(loss, sync);
    syncing_ = false;
  }
  virtual void on_grad_ready(size_t i) = 0;

  bool syncing_ = false;

 private:
  std::vector<std::unique_ptr<GradReadyHook>> hooks_;
};

// --- hook_ga: the blocking allreduce inside the hook --------------------------

class HookGA : public Hooked {
 public:
  using Hooked::Hooked;
  std::string name() const override { return "hook_ga"; }

 protected:
  void on_grad_ready(size_t i) override {
    if (!syncing_) return;
    torch::Tensor grad = params_[i].grad();
    const auto t0 = Clock::now();
    group_.allreduce(grad)->wait();
    record("comm", "allreduce " + names_[i], t0, Clock::now(), /*blocking=*/true);
    grad.div_(world_);
  }
};

// --- async_ga: the hook launches, finish_sync waits ----------------------------

class AsyncGA : public Hooked {
 public:
  using Hooked::Hooked;
  std::string name() const override { return "async_ga"; }

  // The blog's finish_gradient_synchronization.
  void finish_sync() override {
    for (auto& h : pending_) {
      h.work->wait();
      record("comm", "allreduce " + names_[h.index], h.launched, h.work->completion_time());
      const auto t0 = Clock::now();
      h.grad.div_(world_);
      record("compute", "average", t0, Clock::now());
    }
    pending_.clear();
  }

 protected:
  void on_grad_ready(size_t i) override {
    if (!syncing_) return;
    torch::Tensor grad = params_[i].grad();
    const auto t0 = Clock::now();
    pending_.push_back({group_.allreduce(grad), grad, i, t0});
  }

 private:
  struct Pending {
    ddp::WorkPtr work;
    torch::Tensor grad;
    size_t index;
    Clock::time_point launched;
  };
  std::vector<Pending> pending_;
};

// --- bucket_ga: flat buckets in hook-firing order --------------------------------

class BucketGA : public Hooked {
 public:
  using Hooked::Hooked;
  std::string name() const override { return "bucket_ga"; }

  void finish_sync() override {
    if (!bucket_.empty()) {  // flush the partial bucket
      const auto t0 = Clock::now();
      launch_bucket();
      record("compute", "flatten (last bucket)", t0, pending_.back().launched);
    }
    for (auto& b : pending_) {
      b.work->wait();
      record("comm", "allreduce bucket " + std::to_string(b.id) + " (" + mib(b.flat.nbytes()) + ")",
             b.launched, b.work->completion_time());
      const auto t0 = Clock::now();
      int64_t offset = 0;
      for (size_t i : b.members) {
        torch::Tensor grad = params_[i].grad();
        grad.copy_(b.flat.narrow(0, offset, grad.numel()).view_as(grad));
        grad.div_(world_);
        offset += grad.numel();
      }
      record("compute", "unflatten + average", t0, Clock::now());
    }
    pending_.clear();
  }

 protected:
  void on_grad_ready(size_t i) override {
    if (!syncing_) return;
    bucket_.push_back(i);
    bucket_bytes_ += params_[i].grad().nbytes();
    if (bucket_bytes_ >= static_cast<int64_t>(options_.bucket_cap_mb * 1024 * 1024))
      launch_bucket();
  }

 private:
  void launch_bucket() {
    std::vector<torch::Tensor> grads;
    for (size_t i : bucket_) grads.push_back(params_[i].grad().reshape(-1));
    torch::Tensor flat = torch::cat(grads);
    const auto t0 = Clock::now();
    pending_.push_back({group_.allreduce(flat), flat, bucket_, pending_.size(), t0});
    bucket_.clear();
    bucket_bytes_ = 0;
  }

  struct Pending {
    ddp::WorkPtr work;
    torch::Tensor flat;
    std::vector<size_t> members;  // parameter indices, in the flat order
    size_t id;
    Clock::time_point launched;
  };
  std::vector<size_t> bucket_;  // filling: parameter indices in hook order
  int64_t bucket_bytes_ = 0;
  std::vector<Pending> pending_;
};

// --- ddp: ddp::DistributedDataParallel --------------------------------------------

class Ddp : public DataParallelVariant {
 public:
  using DataParallelVariant::DataParallelVariant;
  std::string name() const override { return "ddp"; }

  // DDP's constructor broadcasts parameters and buffers from rank 0.
  void prepare(torch::nn::AnyModule model) override {
    model_ = model;
    for (const auto& item : model_.ptr()->named_parameters()) {
      if (!item.value().requires_grad()) continue;
      params_.push_back(item.value());
      names_.push_back(item.key());
    }
    has_buffers_ = !model_.ptr()->buffers().empty();
    ddp_ =
        ddp::DistributedDataParallel(std::move(model), ddp::DistributedDataParallelOptions()
                                                           .process_group(options_.group)
                                                           .bucket_cap_mb(options_.bucket_cap_mb));
  }

 protected:
  torch::Tensor forward(const torch::Tensor& input, bool sync) override {
    if (!sync) no_sync_.emplace(*ddp_);  // held through backward
    forward_call_ = Clock::now();
    torch::Tensor out = ddp_->forward(input);
    forward_return_ = Clock::now();
    return out;
  }

  // Backward compute and each bucket's communication come from DDP's own
  // statistics (ddp::IterationStats) on synchronizing micro-batches.
  void backward(const torch::Tensor& loss, bool sync) override {
    const auto t0 = Clock::now();
    loss.backward();
    const auto t1 = Clock::now();
    no_sync_.reset();
    if (!sync) {
      record("compute", "backward (no_sync)", t0, t1);
      return;
    }
    const ddp::IterationStats s = ddp_->stats();
    // Before the module's forward, DDP broadcasts rank 0's buffers
    // (broadcast_buffers, on by default as in PyTorch): blocking.
    const auto module_forward = plus_ms(forward_return_, -s.forward_ms);
    if (has_buffers_ && module_forward > forward_call_) {
      record("comm", "broadcast buffers", forward_call_, module_forward, /*blocking=*/true);
    }
    if (options_.timeline) options_.timeline->add_ddp_backward(s, t1);
  }

 private:
  ddp::DistributedDataParallel ddp_{nullptr};
  std::optional<ddp::NoSyncGuard> no_sync_;
  bool has_buffers_ = false;
  Clock::time_point forward_call_, forward_return_;
};

}  // namespace

const std::vector<std::string>& variant_names() {
  static const std::vector<std::string> names{"simple",   "simple_ga", "hook_ga",
                                              "async_ga", "bucket_ga", "ddp"};
  return names;
}

std::unique_ptr<DataParallelVariant> make_variant(const std::string& name, VariantOptions options) {
  if (name == "simple") return std::make_unique<Simple>(std::move(options));
  if (name == "simple_ga") return std::make_unique<SimpleGA>(std::move(options));
  if (name == "hook_ga") return std::make_unique<HookGA>(std::move(options));
  if (name == "async_ga") return std::make_unique<AsyncGA>(std::move(options));
  if (name == "bucket_ga") return std::make_unique<BucketGA>(std::move(options));
  if (name == "ddp") return std::make_unique<Ddp>(std::move(options));
  std::string known;
  for (const auto& n : variant_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown variant '" + name + "' (known: " + known + ")");
}

}  // namespace ddp_bench
