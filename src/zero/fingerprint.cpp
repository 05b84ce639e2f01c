// The construction-time check that every rank wraps the same optimizer over
// the same parameters: one allgather of a fixed-size header (errors found
// locally, counts, the optimizer's name), then, counts being equal, one of
// per-parameter signatures, so the error can name the first parameter that
// differs and how. Exact (no hash), and once per construction.
#include "zero/zero_impl.h"

#include <ddp/errors.h>

#include "agreement/model_sync.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <utility>
#include <vector>

namespace ddp::detail {
namespace {

constexpr int kNameSlots = 3;            // 24 characters of the name
constexpr int kHeader = 4 + kNameSlots;  // error, count, groups, unused, name
constexpr int kSignature = 8;            // group, dtype, numel, ndim, 4 sizes

std::vector<int64_t> signature(const at::Tensor& p, size_t group) {
  std::vector<int64_t> s = {static_cast<int64_t>(group),
                            static_cast<int64_t>(p.scalar_type()),
                            p.numel(),
                            p.dim(),
                            -1,
                            -1,
                            -1,
                            -1};
  for (int64_t d = 0; d < std::min<int64_t>(p.dim(), 4); ++d) s[4 + d] = p.size(d);
  return s;
}

std::string describe(const int64_t* s) {
  std::ostringstream out;
  out << "shape [";
  for (int64_t d = 0; d < std::min<int64_t>(s[3], 4); ++d) out << (d ? ", " : "") << s[4 + d];
  if (s[3] > 4) out << ", ...";
  out << "], " << c10::toString(static_cast<c10::ScalarType>(s[1])) << ", param group " << s[0];
  return out.str();
}

std::string name_of(const int64_t* header) {
  std::string name(reinterpret_cast<const char*>(header + 4), kNameSlots * 8);
  return name.substr(0, name.find('\0'));
}

}  // namespace

void check_same_on_every_rank(ProcessGroup& group, const std::string& optimizer,
                              const std::vector<at::Tensor>& params,
                              const std::vector<size_t>& group_of, const std::string& local_error) {
  // About the ranks `peers`.
  auto context = [&group](std::vector<int> peers) {
    return group.error_context("ZeroRedundancyOptimizer").about(std::move(peers));
  };
  at::Tensor sigs = at::empty({static_cast<int64_t>(params.size()), kSignature}, at::kLong);
  for (size_t i = 0; i < params.size(); ++i) {
    const auto s = signature(params[i], group_of[i]);
    for (int k = 0; k < kSignature; ++k) sigs[i][k] = s[k];
  }
  at::Tensor header = at::zeros({kHeader}, at::kLong);
  int64_t* h = header.data_ptr<int64_t>();
  h[0] = local_error.empty() ? 0 : 1;
  h[1] = static_cast<int64_t>(params.size());
  h[2] = group_of.empty() ? 0 : static_cast<int64_t>(group_of.back()) + 1;
  std::memcpy(h + 4, optimizer.data(), std::min<size_t>(optimizer.size(), kNameSlots * 8 - 1));

  const auto headers = allgather(group, header);
  for (int r = 0; r < group.size(); ++r) {
    if (headers[r].data_ptr<int64_t>()[0] == 0) continue;
    if (r == group.rank()) throw InvalidArgument(context({}), local_error);
    throw InvalidArgument(
        context({r}), "rank " + std::to_string(r) + " refused its parameters (its error says why)");
  }
  const int64_t* h0 = headers[0].data_ptr<int64_t>();
  for (int r = 1; r < group.size(); ++r) {
    const int64_t* hr = headers[r].data_ptr<int64_t>();
    if (name_of(hr) != name_of(h0)) {
      throw InvalidArgument(
          context({0, r}),
          "rank " + std::to_string(r) + " wraps " + name_of(hr) + " but rank 0 wraps " +
              name_of(h0) + "; every rank must construct it with the same optimizer options type");
    }
    if (hr[1] != h0[1] || hr[2] != h0[2]) {
      throw InvalidArgument(
          context({0, r}),
          "rank " + std::to_string(r) + " has " + std::to_string(hr[1]) + " parameters in " +
              std::to_string(hr[2]) + " groups but rank 0 has " + std::to_string(h0[1]) + " in " +
              std::to_string(h0[2]) + "; every rank must pass the same model's parameters");
    }
  }
  const auto all = allgather(group, sigs.view(-1));
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t* s0 = all[0].data_ptr<int64_t>() + i * kSignature;
    for (int r = 1; r < group.size(); ++r) {
      const int64_t* sr = all[r].data_ptr<int64_t>() + i * kSignature;
      if (!std::equal(s0, s0 + kSignature, sr)) {
        throw InvalidArgument(context({0, r}),
                              "parameter #" + std::to_string(i) + " differs: rank " +
                                  std::to_string(r) + " has " + describe(sr) + ", rank 0 has " +
                                  describe(s0) +
                                  "; every rank must pass the same model's parameters "
                                  "in the same order");
      }
    }
  }
}

}  // namespace ddp::detail
