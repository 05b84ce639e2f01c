#include "collectives/shm/zero_copy.h"

#include "collectives/reduce_kernels.h"
#include "collectives/shm/collectives.h"
#include "collectives/shm/segment.h"
#include "collectives/shm/slices.h"

#include <ddp/errors.h>

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include <sys/mman.h>

namespace ddp::detail::shm {
namespace {

// Bytes reduced and copied out at a time: small enough that the result is
// still in cache when it is copied to the other parts.
constexpr int64_t kReduceChunkBytes = 64 << 10;

constexpr char kErrorMark = '!';

}  // namespace

Region::~Region() { munmap(base_, per_rank_ * static_cast<size_t>(world_)); }

std::shared_ptr<Region> allocate_region(Channel& ch, uint64_t id, size_t per_rank) {
  const size_t total = per_rank * static_cast<size_t>(ch.world());
  const bool root = ch.rank() == 0;
  const size_t room = static_cast<size_t>(ch.chunk_bytes()) - 1;  // for the name or the error
  std::string name;
  void* base = nullptr;

  // Rank 0 creates the file, or says why it could not: then nobody has
  // zero-copy memory this time (a small /dev/shm, as in containers).
  ch.describe_allocation(static_cast<int64_t>(per_rank));
  const uint64_t s = ch.begin_step(root);
  if (root) {
    std::string message;
    name = fresh_segment_name();
    try {
      base = create_mapping(name, total);
      message = name;
    } catch (const std::exception& e) {
      message = kErrorMark + std::string(e.what());
    }
    message.resize(std::min(message.size(), room));
    std::memcpy(ch.slot(0, s), message.c_str(), message.size() + 1);
    ch.publish(COPIED, s);
    ch.finish_step(s);
    if (!base) {
      std::fprintf(stderr,
                   "ddp: shm: no zero-copy memory (%zu bytes), so buffers stay in private "
                   "memory: %s\n",
                   total, message.c_str() + 1);
      return nullptr;
    }
  } else {
    ch.wait(0, COPIED, s);
    ch.agree(0);  // rank 0 learns of a disagreement at the next step, which waits for all
    name = ch.slot(0, s);
    ch.finish_step(s);
    if (!name.empty() && name[0] == kErrorMark) return nullptr;
    base = open_mapping(name, total, "the ranks asked for zero-copy memory of different sizes");
  }
  auto region = std::make_shared<Region>(id, static_cast<char*>(base), per_rank, ch.world());

  // Every rank says it has mapped the file; rank 0 then removes the name
  // and says so, so that nobody returns while the name is still there.
  const uint64_t all_mapped = ch.begin_step(false);
  ch.publish(COPIED, all_mapped);
  if (root) {
    try {
      ch.wait_all(COPIED, all_mapped);
    } catch (...) {
      Segment::unlink(name);  // nobody else may come: leave nothing behind
      throw;
    }
    Segment::unlink(name);
    ch.publish(REDUCED, all_mapped);
  } else {
    ch.wait(0, REDUCED, all_mapped);
  }
  ch.finish_step(all_mapped);
  return region;
}

void allreduce_in_region(Channel& ch, const Region& region, size_t offset, const at::Tensor& tensor,
                         ReduceOp op) {
  const int64_t n = tensor.numel();
  if (n == 0) return;
  const int w = ch.world(), r = ch.rank();
  const size_t es = tensor.element_size();
  const ReduceKernel kernel = reduce_kernel(tensor.scalar_type(), op);

  // Every rank must reduce the same part of the region: the descriptor says which.
  ch.describe(OpKind::ALLREDUCE, n, static_cast<int>(tensor.scalar_type()), static_cast<int>(op),
              -1, Variant::ZERO_COPY);
  ch.describe_memory(region.id(), offset);
  const uint64_t s = ch.begin_step(false);
  ch.publish(COPIED, s);
  ch.wait_all(COPIED, s);
  ch.agree_all();

  const Slices slices(n, w, es);
  const int64_t per_chunk = std::max<int64_t>(1, kReduceChunkBytes / static_cast<int64_t>(es));
  char* own = region.part(r) + offset;
  for (int64_t lo = slices.lo(r); lo < slices.lo(r) + slices.len(r); lo += per_chunk) {
    const int64_t m = std::min(per_chunk, slices.lo(r) + slices.len(r) - lo);
    const size_t at = static_cast<size_t>(lo) * es;
    for (int q = 0; q < w; ++q) {
      if (q != r) kernel(own + at, own + at, region.part(q) + offset + at, m);
    }
    for (int q = 0; q < w; ++q) {
      if (q != r) std::memcpy(region.part(q) + offset + at, own + at, m * es);
    }
  }
  ch.publish(REDUCED, s);
  ch.wait_all(REDUCED, s);
  ch.finish_step(s);
  finish_average(tensor, op, w);
}

}  // namespace ddp::detail::shm
