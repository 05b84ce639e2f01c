// PowerSGD hooks. Each runs synchronously on the DDP communication thread:
// its collectives (uncompressed batch, then Ps, then Qs) are issued and
// waited for in that order, one bucket after another, so every rank issues
// the same sequence whatever order buckets become ready in. (PyTorch 1.13
// chains them in future callbacks on backend threads; with several buckets
// in flight ranks can interleave them differently and Gloo aborts.)
//
// Numerics follow PyTorch 1.13's implementation, so results can be compared:
// tensors to compress are visited grouped by shape (in order of first
// appearance); random Qs come from torch's CPU generator seeded with
// numpy-RandomState-compatible draws; Gram-Schmidt for rank <= 2 (and for
// half precision), QR beyond; the local error covers the whole bucket.
#include <ddp/hooks/powersgd.h>

#include <ddp/errors.h>
#include <ddp/hooks/default_hooks.h>

#include "hooks/state_dict_entries.h"
#include "rendezvous/default_group.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <sstream>

namespace ddp {
namespace {

// Orthonormalizes the columns of `m` (n x r) in place.
void orthogonalize(at::Tensor m, double epsilon) {
  const int64_t cols = m.size(1);
  const bool low_precision = m.scalar_type() == at::kHalf || m.scalar_type() == at::kBFloat16;
  if (cols > 2 && !low_precision) {
    m.copy_(std::get<0>(at::linalg_qr(m)));
    return;
  }
  for (int64_t i = 0; i < cols; ++i) {
    at::Tensor col = m.narrow(1, i, 1);
    col.div_(epsilon == 0 ? at::norm(col) : at::norm(col) + epsilon);
    if (i + 1 < cols) {
      at::Tensor rest = m.narrow(1, i + 1, cols - i - 1);
      rest.sub_(at::sum(col * rest, 0, /*keepdim=*/true) * col);
    }
  }
}

// Fills `q` with standard normal values from `generator` (seeded from
// state.next_seed(): as torch.manual_seed(seed); torch.randn(...) would).
// Drawn on the CPU whatever q's device, as PyTorch's hook does: the same Q
// on every device.
void fill_random(at::Tensor q, at::Generator& generator) {
  q.copy_(at::randn(q.sizes(), generator, q.options().device(at::kCPU)));
}

void allreduce_sum(const ProcessGroupPtr& pg, const at::Tensor& t) {
  if (t.numel() > 0) pg->allreduce(t)->wait();
}

// Error feedback, before compression: adds the last error of this bucket
// (zeros the first time) and returns a copy of the corrected input.
at::Tensor apply_error_feedback(std::map<size_t, at::Tensor>& errors, size_t index,
                                at::Tensor& input) {
  auto it = errors.find(index);
  if (it == errors.end()) {
    errors[index] = at::zeros_like(input);
  } else {
    input.add_(it->second);
  }
  return input.clone();
}

}  // namespace

HookStateDict PowerSGDState::state_dict() const {
  using namespace detail;
  HookStateDict d;
  d.shared["iter"] = int_entry(iter_);
  d.shared["numel_before"] = int_entry(numel_before_);
  d.shared["numel_after"] = int_entry(numel_after_);
  d.shared["next_stats_report"] = int_entry(next_stats_report_);
  d.shared["layout"] = int_entry(layout_);
  std::ostringstream rng;
  rng << rng_;
  const std::string text = rng.str();
  at::Tensor bytes = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
  std::memcpy(bytes.data_ptr(), text.data(), text.size());
  d.shared["rng"] = bytes;
  put_per_bucket(d.shared, "p.", p_memory_);
  put_per_bucket(d.shared, "q.", q_memory_);
  put_per_bucket(d.per_rank, "error.", error_);
  return d;
}

void PowerSGDState::load_state_dict(const HookStateDict& d) {
  using namespace detail;
  const std::string owner = "PowerSGDState";
  // Everything is read before any member changes.
  const int64_t iter = read_int(d.shared, "iter", owner);
  const int64_t before = read_int(d.shared, "numel_before", owner);
  const int64_t after = read_int(d.shared, "numel_after", owner);
  const int64_t next_report = read_int(d.shared, "next_stats_report", owner);
  const int64_t layout = read_int(d.shared, "layout", owner);
  const at::Tensor bytes = entry(d.shared, "rng", owner).contiguous();
  if (bytes.scalar_type() != at::kByte) bad_state_dict(owner, "'rng' is not bytes");
  std::istringstream text(
      std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel())));
  std::mt19937 rng;
  if (!(text >> rng)) bad_state_dict(owner, "'rng' does not read as a generator's state");
  auto p = per_bucket(d.shared, "p.", owner), q = per_bucket(d.shared, "q.", owner);
  auto error = per_bucket(d.per_rank, "error.", owner);
  iter_ = iter;
  numel_before_ = before;
  numel_after_ = after;
  next_stats_report_ = next_report;
  layout_ = layout;
  rng_ = rng;
  p_memory_ = std::move(p);
  q_memory_ = std::move(q);
  error_ = std::move(error);  // empty in another world size: error feedback starts afresh
}

void PowerSGDState::place(size_t index, const at::Device& device) {
  for (auto* memory : {&error_, &p_memory_, &q_memory_}) {
    auto it = memory->find(index);
    if (it != memory->end() && it->second.device() != device) it->second = it->second.to(device);
  }
}

PowerSGDState::PowerSGDState(ProcessGroupPtr process_group_, int64_t rank, int64_t start_iter,
                             double min_rate, bool error_feedback, bool warm, double epsilon,
                             uint64_t seed, int64_t logging_frequency)
    : process_group(std::move(process_group_)),
      matrix_approximation_rank(rank),
      start_powerSGD_iter(start_iter),
      min_compression_rate(min_rate),
      use_error_feedback(error_feedback),
      warm_start(warm),
      orthogonalization_epsilon(epsilon),
      random_seed(seed),
      compression_stats_logging_frequency(logging_frequency),
      rng_(static_cast<std::mt19937::result_type>(seed)) {
  auto bad = [](const std::string& what) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "PowerSGDState", {}}, what);
  };
  if (rank < 1) bad("matrix_approximation_rank must be >= 1, got " + std::to_string(rank));
  if (min_rate <= 0) bad("min_compression_rate must be > 0, got " + std::to_string(min_rate));
  if (epsilon < 0) bad("orthogonalization_epsilon must be >= 0, got " + std::to_string(epsilon));
  if (logging_frequency < 1) {
    bad("compression_stats_logging_frequency must be >= 1, got " +
        std::to_string(logging_frequency));
  }
  if ((error_feedback || warm) && start_iter < 2) {
    bad("start_powerSGD_iter must be >= 2 when use_error_feedback or warm_start is on (got " +
        std::to_string(start_iter) +
        "): DDP rebuilds its buckets after iteration 1, which would invalidate the memorized "
        "tensors");
  }
}

PowerSGDState::CompressionStats PowerSGDState::compression_stats() const {
  CompressionStats s;
  s.numel_before = numel_before_;
  s.numel_after = numel_after_;
  s.rate = numel_after_ > 0 ? static_cast<double>(numel_before_) / numel_after_ : 0;
  return s;
}

void PowerSGDState::end_compressed_step(size_t index, const at::Tensor& input_copy,
                                        const at::Tensor& decompressed, const GradBucket& bucket) {
  if (use_error_feedback) error_[index] = input_copy - decompressed;
  if (!warm_start) {
    p_memory_.clear();
    q_memory_.clear();
  }
  maybe_increase_iter(bucket);
}

FuturePtr PowerSGDState::allreduce_before_start(GradBucket& bucket) {
  if (iter_ >= start_powerSGD_iter) return FuturePtr();
  maybe_increase_iter(bucket);
  return allreduce_hook(process_group, bucket);
}

void PowerSGDState::maybe_increase_iter(const GradBucket& bucket) {
  if (bucket.is_last()) ++iter_;
}

void PowerSGDState::forget_if_rebuilt(const GradBucket& bucket) {
  if (bucket.layout() == layout_) return;
  layout_ = bucket.layout();
  error_.clear();
  p_memory_.clear();
  q_memory_.clear();
}

void PowerSGDState::report_compression_stats(const GradBucket& bucket) {
  if (!bucket.is_last() || iter_ < next_stats_report_) return;
  auto s = compression_stats();
  if (detail::group_or_default(process_group)->rank() == 0) {
    std::cerr << "ddp PowerSGD: iteration " << iter_ << ": " << s.numel_before
              << " elements before compression, " << s.numel_after << " after, rate " << s.rate
              << std::endl;
  }
  next_stats_report_ = iter_ + compression_stats_logging_frequency;
}

uint64_t PowerSGDState::next_seed() {
  // numpy.random.RandomState(seed).randint(1_000_000_000): masked rejection.
  uint32_t draw;
  do {
    draw = static_cast<uint32_t>(rng_()) & ((1u << 30) - 1);
  } while (draw > 999999999u);
  return draw;
}

FuturePtr powerSGD_hook(PowerSGDState& state, GradBucket& bucket) {
  if (auto plain = state.allreduce_before_start(bucket)) return plain;
  state.forget_if_rebuilt(bucket);
  state.place(bucket.index(), bucket.buffer().device());
  auto pg = detail::group_or_default(state.process_group);
  at::Tensor input = bucket.buffer();
  const size_t index = bucket.index();
  at::Tensor input_copy;
  if (state.use_error_feedback) input_copy = apply_error_feedback(state.error_, index, input);

  // Which gradients to compress; the others go as one uncompressed batch.
  struct Compressed {
    at::Tensor matrix;  // n x m view into the bucket
    int64_t rank;
  };
  std::vector<Compressed> compressed;
  std::vector<at::Tensor> uncompressed;
  for (const at::Tensor& grad : bucket.gradients()) {
    at::Tensor matrix = grad.view({grad.dim() > 0 ? grad.size(0) : 1, -1});
    const int64_t n = matrix.size(0), m = matrix.size(1);
    const int64_t r = std::min({n, m, state.matrix_approximation_rank});
    const bool worth = (n + m) * r * state.min_compression_rate < static_cast<double>(n * m);
    state.numel_before_ += n * m;
    state.numel_after_ += worth ? (n + m) * r : n * m;
    if (worth) {
      compressed.push_back({matrix, r});
    } else {
      uncompressed.push_back(grad);
    }
  }
  state.report_compression_stats(bucket);
  // Group by shape, in order of first appearance (PyTorch's order).
  std::vector<Compressed> ordered;
  for (size_t i = 0; i < compressed.size(); ++i) {
    bool seen = false;
    for (size_t j = 0; j < i && !seen; ++j)
      seen = compressed[j].matrix.sizes() == compressed[i].matrix.sizes();
    if (seen) continue;
    for (size_t j = i; j < compressed.size(); ++j) {
      if (compressed[j].matrix.sizes() == compressed[i].matrix.sizes())
        ordered.push_back(compressed[j]);
    }
  }

  int64_t p_size = 0, q_size = 0;
  for (const auto& c : ordered) {
    p_size += c.matrix.size(0) * c.rank;
    q_size += c.matrix.size(1) * c.rank;
  }
  const bool randomize = !state.warm_start || !state.p_memory_.count(index);
  if (randomize) {
    state.p_memory_[index] = at::empty({p_size}, input.options());
    state.q_memory_[index] = at::empty({q_size}, input.options());
  }
  std::vector<at::Tensor> ps, qs;
  int64_t p_at = 0, q_at = 0;
  for (const auto& c : ordered) {
    const int64_t n = c.matrix.size(0), m = c.matrix.size(1);
    ps.push_back(state.p_memory_[index].narrow(0, p_at, n * c.rank).view({n, c.rank}));
    qs.push_back(state.q_memory_[index].narrow(0, q_at, m * c.rank).view({m, c.rank}));
    p_at += n * c.rank;
    q_at += m * c.rank;
  }
  if (randomize) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(state.next_seed());
    for (auto& q : qs) {
      fill_random(q, generator);
      orthogonalize(q, state.orthogonalization_epsilon);
    }
  } else {
    for (auto& q : qs) orthogonalize(q, state.orthogonalization_epsilon);
  }
  for (size_t k = 0; k < ordered.size(); ++k) at::matmul_out(ps[k], ordered[k].matrix, qs[k]);

  // The collectives, in this order on every rank: uncompressed, Ps, Qs.
  std::vector<at::Tensor> flat;
  for (const auto& t : uncompressed) flat.push_back(t.reshape(-1));
  at::Tensor batch = flat.empty() ? at::empty({0}, input.options()) : at::cat(flat);
  allreduce_sum(pg, batch);
  batch.div_(pg->size());
  int64_t offset = 0;
  for (auto& t : uncompressed) {
    t.copy_(batch.narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
  allreduce_sum(pg, state.p_memory_[index]);  // orthogonalized next: no need to divide
  for (auto& p : ps) orthogonalize(p, state.orthogonalization_epsilon);
  for (size_t k = 0; k < ordered.size(); ++k) {
    at::matmul_out(qs[k], ordered[k].matrix.t(), ps[k]);
  }
  allreduce_sum(pg, state.q_memory_[index]);
  state.q_memory_[index].div_(pg->size());
  for (size_t k = 0; k < ordered.size(); ++k) {
    at::matmul_out(ordered[k].matrix, ps[k], qs[k].t());
  }

  state.end_compressed_step(index, input_copy, input, bucket);
  return completed_future(input);
}

FuturePtr batched_powerSGD_hook(PowerSGDState& state, GradBucket& bucket) {
  if (auto plain = state.allreduce_before_start(bucket)) return plain;
  state.forget_if_rebuilt(bucket);
  state.place(bucket.index(), bucket.buffer().device());
  auto pg = detail::group_or_default(state.process_group);
  at::Tensor buffer = bucket.buffer();
  const size_t index = bucket.index();
  const int64_t length = buffer.numel();
  const int64_t side = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(length))));
  at::Tensor input = at::zeros({side * side}, buffer.options());
  input.narrow(0, 0, length).copy_(buffer);
  at::Tensor input_copy;
  if (state.use_error_feedback) input_copy = apply_error_feedback(state.error_, index, input);
  at::Tensor matrix = input.view({side, side});
  const int64_t r = std::min(side, state.matrix_approximation_rank);
  state.numel_before_ += length;
  state.numel_after_ += 2 * side * r;
  state.report_compression_stats(bucket);

  if (!state.warm_start || !state.p_memory_.count(index)) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(state.next_seed());
    state.p_memory_[index] = at::empty({side, r}, buffer.options());
    state.q_memory_[index] = at::empty({side, r}, buffer.options());
    fill_random(state.q_memory_[index], generator);
  }
  at::Tensor p = state.p_memory_[index], q = state.q_memory_[index];
  orthogonalize(q, state.orthogonalization_epsilon);  // a warm-started Q too
  at::matmul_out(p, matrix, q);
  allreduce_sum(pg, p);
  orthogonalize(p, state.orthogonalization_epsilon);
  at::matmul_out(q, matrix.t(), p);
  allreduce_sum(pg, q);
  q.div_(pg->size());
  at::matmul_out(matrix, p, q.t());

  state.end_compressed_step(index, input_copy, input, bucket);
  buffer.copy_(input.narrow(0, 0, length));
  return completed_future(buffer);
}

}  // namespace ddp
