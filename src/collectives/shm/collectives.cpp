// Data movement per step; who waits for what is in channel.h.
//
// Large all-reduce, per chunk of chunk_bytes (m elements), rank r owning the
// slice [lo(r), lo(r+1)) of it (64-byte aligned):
//   1. copy every slice but its own into its slot            -> COPIED
//   2. reduce its own slice: the tensor's slice with every
//      peer's slot slice, in place; copy the result into its
//      slot (peers read it there)                            -> REDUCED
//   3. copy every peer's reduced slice out of that peer's slot -> CONSUMED
// Per all-reduced byte a rank reads (w-1)/w + 1 + 1/w + (w-1)/w and writes
// (w-1)/w + (w-1)/w + 1/w + (w-1)/w bytes: 2.5 + 2.0 = 4.5 for w = 2
// (its own slice never goes through shared memory).
#include "collectives/shm/collectives.h"

#include "collectives/reduce_kernels.h"

#include <algorithm>
#include <cstring>

namespace ddp::detail::shm {
namespace {

char* bytes_of(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

// Element offsets of each rank's slice of an m-element chunk: whole 64-byte
// units, so that no two ranks write one cache line.
struct Slices {
  Slices(int64_t m, int world, size_t element_size)
      : m_(m), unit_(std::max<int64_t>(1, 64 / static_cast<int64_t>(element_size))) {
    const int64_t units = (m + unit_ - 1) / unit_;
    per_rank_ = (units + world - 1) / world * unit_;
  }
  int64_t lo(int q) const { return std::min(m_, q * per_rank_); }
  int64_t len(int q) const { return lo(q + 1) - lo(q); }

 private:
  int64_t m_, unit_, per_rank_ = 0;
};

void finish_average(const at::Tensor& t, ReduceOp op, int world) {
  if (op == ReduceOp::AVG && world > 1) t.div_(world);
}

void allreduce_small(Channel& ch, const at::Tensor& t, ReduceKernel kernel) {
  const size_t bytes = t.nbytes();
  const int w = ch.world(), r = ch.rank();
  const uint64_t s = ch.begin_step(true);
  std::memcpy(ch.slot(r, s), bytes_of(t), bytes);
  ch.publish(COPIED, s);
  ch.wait_all(COPIED, s);
  // Every rank reduces all slots in rank order: the same bits everywhere.
  if (w > 1) {
    kernel(bytes_of(t), ch.slot(0, s), ch.slot(1, s), static_cast<size_t>(t.numel()));
    for (int q = 2; q < w; ++q) kernel(bytes_of(t), bytes_of(t), ch.slot(q, s), t.numel());
  }
  ch.finish_step(s);
}

void allreduce_large(Channel& ch, const at::Tensor& t, ReduceKernel kernel) {
  const size_t es = t.element_size();
  const int64_t n = t.numel(), per_step = ch.chunk_bytes() / static_cast<int64_t>(es);
  const int w = ch.world(), r = ch.rank();
  for (int64_t off = 0; off < n; off += per_step) {
    const int64_t m = std::min(per_step, n - off);
    const Slices sl(m, w, es);
    char* src = bytes_of(t) + off * es;
    const uint64_t s = ch.begin_step(true);
    char* mine = ch.slot(r, s);
    for (int q = 0; q < w; ++q) {
      if (q != r) std::memcpy(mine + sl.lo(q) * es, src + sl.lo(q) * es, sl.len(q) * es);
    }
    ch.publish(COPIED, s);
    ch.wait_all(COPIED, s);
    if (sl.len(r) > 0) {
      char* own = src + sl.lo(r) * es;
      for (int q = 0; q < w; ++q) {
        if (q != r) kernel(own, own, ch.slot(q, s) + sl.lo(r) * es, sl.len(r));
      }
      std::memcpy(mine + sl.lo(r) * es, own, sl.len(r) * es);
    }
    ch.publish(REDUCED, s);
    ch.wait_all(REDUCED, s);
    for (int q = 0; q < w; ++q) {
      if (q != r) std::memcpy(src + sl.lo(q) * es, ch.slot(q, s) + sl.lo(q) * es, sl.len(q) * es);
    }
    ch.finish_step(s);
  }
}

}  // namespace

void allreduce(Channel& ch, const at::Tensor& tensor, ReduceOp op, int64_t small_bytes) {
  if (tensor.numel() == 0) return;
  const ReduceKernel kernel = reduce_kernel(tensor.scalar_type(), op);
  if (static_cast<int64_t>(tensor.nbytes()) <= small_bytes) {
    allreduce_small(ch, tensor, kernel);
  } else {
    allreduce_large(ch, tensor, kernel);
  }
  finish_average(tensor, op, ch.world());
}

void broadcast(Channel& ch, const at::Tensor& tensor, int root) {
  const int64_t total = static_cast<int64_t>(tensor.nbytes());
  const bool is_root = ch.rank() == root;
  for (int64_t off = 0; off < total; off += ch.chunk_bytes()) {
    const size_t len = static_cast<size_t>(std::min(ch.chunk_bytes(), total - off));
    const uint64_t s = ch.begin_step(is_root);
    if (is_root) {
      std::memcpy(ch.slot(root, s), bytes_of(tensor) + off, len);
      ch.publish(COPIED, s);
    } else {
      ch.wait(root, COPIED, s);
      std::memcpy(bytes_of(tensor) + off, ch.slot(root, s), len);
    }
    ch.finish_step(s);
  }
}

void allgather(Channel& ch, const std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  const int64_t total = static_cast<int64_t>(input.nbytes());
  const int w = ch.world(), r = ch.rank();
  for (int64_t off = 0; off < total; off += ch.chunk_bytes()) {
    const size_t len = static_cast<size_t>(std::min(ch.chunk_bytes(), total - off));
    const uint64_t s = ch.begin_step(true);
    std::memcpy(ch.slot(r, s), bytes_of(input) + off, len);
    ch.publish(COPIED, s);
    ch.wait_all(COPIED, s);
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
  for (int64_t off = 0; off < n; off += per_step) {
    const int64_t m = std::min(per_step, n - off);
    const uint64_t s = ch.begin_step(true);
    char* mine = ch.slot(r, s);
    for (int q = 0; q < w; ++q) {
      if (q != r) std::memcpy(mine + q * per_step * es, bytes_of(inputs[q]) + off * es, m * es);
    }
    ch.publish(COPIED, s);
    ch.wait_all(COPIED, s);
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
  const uint64_t s = ch.begin_step(false);
  ch.publish(COPIED, s);
  ch.wait_all(COPIED, s);
  ch.finish_step(s);
}

}  // namespace ddp::detail::shm
