// Data movement per step; who waits for what is in channel.h; the large
// all-reduce is in pipeline.cpp.
#include "collectives/shm/collectives.h"

#include "collectives/reduce_kernels.h"
#include "collectives/shm/pipeline.h"

#include <algorithm>
#include <cstring>

namespace ddp::detail::shm {
namespace {

char* bytes_of(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

int dtype_of(const at::Tensor& t) { return static_cast<int>(t.scalar_type()); }

void allreduce_small(Channel& ch, const at::Tensor& t, ReduceKernel kernel) {
  const size_t bytes = t.nbytes();
  const int w = ch.world(), r = ch.rank();
  const uint64_t s = ch.begin_step(true);
  std::memcpy(ch.slot(r, s), bytes_of(t), bytes);
  ch.publish(COPIED, s);
  ch.wait_all(COPIED, s);
  ch.agree_all();
  // Every rank reduces all slots in rank order: the same bits everywhere.
  if (w > 1) {
    kernel(bytes_of(t), ch.slot(0, s), ch.slot(1, s), static_cast<size_t>(t.numel()));
    for (int q = 2; q < w; ++q) kernel(bytes_of(t), bytes_of(t), ch.slot(q, s), t.numel());
  }
  ch.finish_step(s);
}

}  // namespace

void finish_average(const at::Tensor& t, ReduceOp op, int world) {
  if (op == ReduceOp::AVG && world > 1) t.div_(world);
}

void allreduce(Channel& ch, const at::Tensor& tensor, ReduceOp op, int64_t small_bytes,
               OpKind kind) {
  if (tensor.numel() == 0) return;
  const ReduceKernel kernel = reduce_kernel(tensor.scalar_type(), op);
  const bool one_step = static_cast<int64_t>(tensor.nbytes()) <= small_bytes;
  ch.describe(kind, tensor.numel(), dtype_of(tensor), static_cast<int>(op), -1,
              one_step ? Variant::ONE_STEP : Variant::PIPELINED);
  if (one_step) {
    allreduce_small(ch, tensor, kernel);
  } else {
    allreduce_pipelined(ch, bytes_of(tensor), tensor.numel(), tensor.element_size(), kernel);
  }
  finish_average(tensor, op, ch.world());
}

// At the first step every rank publishes COPIED (non-roots: of nothing but
// their descriptor), and the root waits for them all: so that a root that
// disagrees (two ranks each the root) is found on every rank.
void broadcast(Channel& ch, const at::Tensor& tensor, int root) {
  const int64_t total = static_cast<int64_t>(tensor.nbytes());
  const bool is_root = ch.rank() == root;
  ch.describe(OpKind::BROADCAST, tensor.numel(), dtype_of(tensor), -1, root);
  for (int64_t off = 0; off < total; off += ch.chunk_bytes()) {
    const size_t len = static_cast<size_t>(std::min(ch.chunk_bytes(), total - off));
    const uint64_t s = ch.begin_step(is_root);
    if (is_root) {
      std::memcpy(ch.slot(root, s), bytes_of(tensor) + off, len);
      ch.publish(COPIED, s);
      if (off == 0) {
        ch.wait_all(COPIED, s);
        ch.agree_all();
      }
    } else {
      if (off == 0) ch.publish(COPIED, s);
      ch.wait(root, COPIED, s);
      if (off == 0) ch.agree(root);
      std::memcpy(bytes_of(tensor) + off, ch.slot(root, s), len);
    }
    ch.finish_step(s);
  }
}

void allgather(Channel& ch, const std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  const int64_t total = static_cast<int64_t>(input.nbytes());
  const int w = ch.world(), r = ch.rank();
  ch.describe(OpKind::ALLGATHER, input.numel(), dtype_of(input));
  for (int64_t off = 0; off < total; off += ch.chunk_bytes()) {
    const size_t len = static_cast<size_t>(std::min(ch.chunk_bytes(), total - off));
    const uint64_t s = ch.begin_step(true);
    std::memcpy(ch.slot(r, s), bytes_of(input) + off, len);
    ch.publish(COPIED, s);
    ch.wait_all(COPIED, s);
    if (off == 0) ch.agree_all();
    for (int q = 0; q < w; ++q) {
      std::memcpy(bytes_of(outputs[q]) + off, q == r ? bytes_of(input) + off : ch.slot(q, s), len);
    }
    ch.finish_step(s);
  }
}

// Per step, m elements of each destination's input: rank r copies
// inputs[q][off, off+m) into part q of its slot for every q != r; then rank r
// reduces its own input's piece with part r of every peer's slot.
void reduce_scatter(Channel& ch, const at::Tensor& output, const std::vector<at::Tensor>& inputs,
                    ReduceOp op) {
  const size_t es = output.element_size();
  const int64_t n = output.numel();
  const int w = ch.world(), r = ch.rank();
  const int64_t unit = std::max<int64_t>(1, 64 / static_cast<int64_t>(es));
  const int64_t per_step =
      std::max<int64_t>(1, ch.chunk_bytes() / (w * static_cast<int64_t>(es)) / unit * unit);
  const ReduceKernel kernel = reduce_kernel(output.scalar_type(), op);
  ch.describe(OpKind::REDUCE_SCATTER, n, dtype_of(output), static_cast<int>(op));
  for (int64_t off = 0; off < n; off += per_step) {
    const int64_t m = std::min(per_step, n - off);
    const uint64_t s = ch.begin_step(true);
    char* mine = ch.slot(r, s);
    for (int q = 0; q < w; ++q) {
      if (q != r) std::memcpy(mine + q * per_step * es, bytes_of(inputs[q]) + off * es, m * es);
    }
    ch.publish(COPIED, s);
    ch.wait_all(COPIED, s);
    if (off == 0) ch.agree_all();
    char* dst = bytes_of(output) + off * es;
    const char* own = bytes_of(inputs[r]) + off * es;
    if (w == 1) std::memcpy(dst, own, m * es);
    bool first = true;
    for (int q = 0; q < w; ++q) {
      if (q == r) continue;
      kernel(dst, first ? own : dst, ch.slot(q, s) + r * per_step * es, m);
      first = false;
    }
    ch.finish_step(s);
  }
  finish_average(output, op, w);
}

void barrier(Channel& ch) {
  ch.describe(OpKind::BARRIER, 0);
  const uint64_t s = ch.begin_step(false);
  ch.publish(COPIED, s);
  ch.wait_all(COPIED, s);
  ch.agree_all();
  ch.finish_step(s);
}

}  // namespace ddp::detail::shm
