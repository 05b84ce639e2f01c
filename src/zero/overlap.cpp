// overlap_with_ddp: ZeRO's update inside DDP's communication hook. Each
// bucket is averaged, then this rank steps its own parameters of the bucket
// and every owner broadcasts them, on DDP's communication thread while
// backward computes the next buckets. Hooks run one bucket at a time in
// bucket order on every rank, so the broadcasts match across ranks. The split
// is by parameter, not by bucket: DDP rebuilding its buckets after the first
// iteration changes nothing, and parameters update from the first iteration.
#include "zero/zero_impl.h"

#include <ddp/errors.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <sstream>

namespace ddp {

FuturePtr zero_hook(ZeroRedundancyOptimizer* optimizer, GradBucket& bucket) {
  if (!optimizer) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "zero_hook", {}}, "the optimizer is null");
  }
  optimizer->step_reduced_bucket(bucket);
  return completed_future(bucket.buffer());
}

void ZeroRedundancyOptimizer::Impl::step_only(const std::vector<size_t>& indices) {
  std::vector<std::pair<size_t, at::Tensor>> subset;
  for (size_t i : indices) subset.emplace_back(group_of[i], params[i]);
  step_subset(*optimizer, subset);
}

void ZeroRedundancyOptimizer::step_reduced_bucket(GradBucket& bucket) {
  Impl& m = *impl_;
  if (!m.overlap) {
    throw InvalidArgument(m.context("zero_hook"),
                          "the ZeroRedundancyOptimizer was "
                          "made without ZeroOptions().overlap_with_ddp(true)");
  }
  m.check_sharded();
  // Average, as DDP's own allreduce would.
  at::Tensor buffer = bucket.buffer();
  buffer.div_(m.group->size());
  m.group->allreduce(buffer)->wait();

  const auto& bucket_params = bucket.parameters();
  const auto grads = bucket.gradients();
  std::vector<size_t> indices, mine, replicated;
  std::vector<at::Tensor> replicated_grads;
  const int next = (m.group->rank() + 1) % m.group->size();
  for (size_t k = 0; k < bucket_params.size(); ++k) {
    auto it = m.index_of.find(bucket_params[k].unsafeGetTensorImpl());
    if (it == m.index_of.end()) {
      std::ostringstream msg;
      msg << "DDP bucket " << bucket.index() << " holds a parameter (shape "
          << bucket_params[k].sizes() << ", " << bucket_params[k].scalar_type()
          << ") that is in none of the "
          << "ZeroRedundancyOptimizer's param groups; construct the optimizer over every "
             "parameter DDP reduces (model->parameters())";
      throw InvalidArgument(m.context("zero_hook"), msg.str());
    }
    indices.push_back(it->second);
    if (m.replica_optimizer && m.owner[it->second] == next) {
      replicated.push_back(it->second);
      replicated_grads.push_back(grads[k]);
    }
    if (m.owner[it->second] != m.group->rank()) continue;
    // The averaged gradient, as DDP's write-back will leave it after backward.
    at::Tensor& grad = bucket_params[k].mutable_grad();
    grad = grads[k];
    mine.push_back(it->second);
  }
  sync_options();
  ++m.updates;
  if (!mine.empty()) m.step_only(mine);
  if (!replicated.empty()) m.step_replica(replicated, replicated_grads);

  // Per owner and dtype, in ascending order: the same list on every rank.
  std::vector<Impl::Bucket> sends;
  std::sort(indices.begin(), indices.end());
  for (int r = 0; r < m.group->size(); ++r) {
    for (size_t i : indices) {
      if (m.owner[i] != r) continue;
      const auto dtype = m.params[i].scalar_type();
      auto it = std::find_if(sends.begin(), sends.end(), [&](const Impl::Bucket& b) {
        return b.root == r && b.dtype == dtype;
      });
      if (it == sends.end()) it = sends.insert(sends.end(), Impl::Bucket{r, dtype, 0, {}});
      it->params.push_back(i);
      it->numel += m.params[i].numel();
    }
  }
  m.broadcast(sends);
  m.updated += indices.size();
}

}  // namespace ddp
