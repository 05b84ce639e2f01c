#include "module/model_sync.h"

#include <ddp/errors.h>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <map>

namespace ddp::detail {
namespace {

constexpr int kMaxDims = 6;
constexpr int kFields = 2 + kMaxDims;  // dtype, ndim, sizes (larger dims: a hash)

std::vector<int64_t> signature(const at::Tensor& t) {
  std::vector<int64_t> s(kFields, -1);
  s[0] = static_cast<int64_t>(t.scalar_type());
  s[1] = t.dim();
  if (t.dim() <= kMaxDims) {
    for (int64_t d = 0; d < t.dim(); ++d) s[2 + d] = t.size(d);
  } else {
    s[2] = static_cast<int64_t>(c10::get_hash(t.sizes().vec()));
  }
  return s;
}

std::string describe(const int64_t* s) {
  std::string out = c10::toString(static_cast<at::ScalarType>(s[0]));
  if (s[1] > kMaxDims) return out + " with " + std::to_string(s[1]) + " dims";
  out += " [";
  for (int64_t d = 0; d < s[1]; ++d) out += (d ? ", " : "") + std::to_string(s[2 + d]);
  return out + "]";
}

std::vector<at::Tensor> allgather(ProcessGroup& group, const at::Tensor& mine) {
  std::vector<at::Tensor> all;
  for (int r = 0; r < group.size(); ++r) all.push_back(at::empty_like(mine));
  group.allgather(all, mine)->wait();
  return all;
}

}  // namespace

void verify_same_tensors(ProcessGroup& group, const std::vector<at::Tensor>& tensors,
                         const std::vector<std::string>& names, const std::string& what) {
  const std::string where = "ddp: rank " + std::to_string(group.rank()) + ": ";
  auto counts = allgather(group, at::tensor({static_cast<int64_t>(tensors.size())}, at::kLong));
  std::string listing;
  bool same_count = true;
  for (int r = 0; r < group.size(); ++r) {
    int64_t c = counts[r].item<int64_t>();
    same_count = same_count && c == static_cast<int64_t>(tensors.size());
    listing += "\n  rank " + std::to_string(r) + ": " + std::to_string(c) + " " + what;
  }
  if (!same_count) {
    throw InvalidArgument(where + "the ranks hold different numbers of " + what + ":" + listing +
                          "\nEvery rank must build the same model.");
  }
  std::vector<int64_t> flat;
  for (const auto& t : tensors) {
    auto s = signature(t);
    flat.insert(flat.end(), s.begin(), s.end());
  }
  auto all = allgather(group, at::tensor(flat, at::kLong));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t* mine = all[0].data_ptr<int64_t>() + i * kFields;
    bool differs = false;
    for (int r = 1; r < group.size() && !differs; ++r) {
      differs = !std::equal(mine, mine + kFields, all[r].data_ptr<int64_t>() + i * kFields);
    }
    if (!differs) continue;
    std::string detail;
    for (int r = 0; r < group.size(); ++r) {
      detail += "\n  rank " + std::to_string(r) + ": " +
                describe(all[r].data_ptr<int64_t>() + i * kFields);
    }
    throw InvalidArgument(where + what + " #" + std::to_string(i) + " ('" + names.at(i) +
                          "' here) differs across ranks:" + detail +
                          "\nEvery rank must build the same model.");
  }
}

void broadcast_coalesced(ProcessGroup& group, const std::vector<at::Tensor>& tensors, int root) {
  if (group.size() == 1 || tensors.empty()) return;
  at::NoGradGuard no_grad;
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  std::vector<std::pair<at::Tensor, std::vector<at::Tensor>>> flats;
  std::vector<WorkPtr> works;
  for (auto& [dtype, group_tensors] : by_dtype) {
    std::vector<at::Tensor> views;
    for (const auto& t : group_tensors) views.push_back(t.detach().reshape(-1));
    at::Tensor flat = at::cat(views);
    works.push_back(group.broadcast(flat, root));
    flats.emplace_back(flat, group_tensors);
  }
  for (size_t k = 0; k < works.size(); ++k) {
    works[k]->wait();
    int64_t offset = 0;
    for (const auto& t : flats[k].second) {
      t.detach().copy_(flats[k].first.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }
}

}  // namespace ddp::detail
