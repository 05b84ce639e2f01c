#include "agreement/model_sync.h"

#include <ddp/errors.h>

#include "base/fnv1a.h"
#include "collectives/flagged_ranks.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cstring>
#include <exception>
#include <algorithm>
#include <map>
#include <string_view>
#include <utility>

namespace ddp::detail {
namespace {

constexpr int kMaxDims = 6;
// name hash, dtype, ndim, sizes (larger dims: a hash)
constexpr int kFields = 3 + kMaxDims;
constexpr size_t kMaxNameBytes = 200;  // names shown in an error, truncated

int64_t name_hash(const std::string& name) {
  return static_cast<int64_t>(Fnv1a().add(name).value());
}

// Same shapes and dtypes in a different order, or two same-sized layers
// swapped, would pass a shape check and then average unrelated parameters:
// the name is part of the signature.
std::vector<int64_t> signature(const at::Tensor& t, const std::string& name) {
  std::vector<int64_t> s(kFields, -1);
  s[0] = name_hash(name);
  s[1] = static_cast<int64_t>(t.scalar_type());
  s[2] = t.dim();
  if (t.dim() <= kMaxDims) {
    for (int64_t d = 0; d < t.dim(); ++d) s[3 + d] = t.size(d);
  } else {
    s[3] = static_cast<int64_t>(c10::get_hash(t.sizes().vec()));
  }
  return s;
}

std::string describe(const int64_t* s) {
  std::string out = c10::toString(static_cast<at::ScalarType>(s[1]));
  if (s[2] > kMaxDims) return out + " with " + std::to_string(s[2]) + " dims";
  out += " [";
  for (int64_t d = 0; d < s[2]; ++d) out += (d ? ", " : "") + std::to_string(s[3 + d]);
  return out + "]";
}

}  // namespace

std::vector<at::Tensor> allgather(ProcessGroup& group, const at::Tensor& mine) {
  std::vector<at::Tensor> all;
  for (int r = 0; r < group.size(); ++r) all.push_back(at::empty_like(mine));
  group.allgather(all, mine)->wait();
  return all;
}

void verify_same_tensors(ProcessGroup& group, const std::vector<at::Tensor>& tensors,
                         const std::vector<std::string>& names, const std::string& what) {
  ErrorContext context = group.error_context();  // peers: the ranks that differ from this one
  auto counts = allgather(group, at::tensor({static_cast<int64_t>(tensors.size())}, at::kLong));
  std::string listing;
  bool same_count = true;
  for (int r = 0; r < group.size(); ++r) {
    int64_t c = counts[r].item<int64_t>();
    if (c != static_cast<int64_t>(tensors.size())) context.peers.push_back(r);
    same_count = same_count && c == static_cast<int64_t>(tensors.size());
    listing += "\n  rank " + std::to_string(r) + ": " + std::to_string(c) + " " + what;
  }
  if (!same_count) {
    throw InvalidArgument(std::move(context), "the ranks hold different numbers of " + what + ":" +
                                                  listing +
                                                  "\nEvery rank must build the same model.");
  }
  std::vector<int64_t> flat;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto s = signature(tensors[i], names.at(i));
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
    // Every rank is here, at the same index: one more exchange, for the names.
    std::string name = names.at(i).substr(0, kMaxNameBytes);
    at::Tensor mine_name = at::zeros({static_cast<int64_t>(kMaxNameBytes)}, at::kByte);
    std::copy(name.begin(), name.end(), mine_name.data_ptr<uint8_t>());
    auto all_names = allgather(group, mine_name);
    std::string detail;
    const int64_t* here = all[group.rank()].data_ptr<int64_t>() + i * kFields;
    for (int r = 0; r < group.size(); ++r) {
      if (!std::equal(here, here + kFields, all[r].data_ptr<int64_t>() + i * kFields)) {
        context.peers.push_back(r);
      }
      const char* chars = reinterpret_cast<const char*>(all_names[r].data_ptr<uint8_t>());
      detail += "\n  rank " + std::to_string(r) + ": " +
                describe(all[r].data_ptr<int64_t>() + i * kFields) + " '" +
                std::string(chars, strnlen(chars, kMaxNameBytes)) + "'";
    }
    throw InvalidArgument(std::move(context), what + " #" + std::to_string(i) + " ('" +
                                                  names.at(i) +
                                                  "' here) differs across ranks:" + detail +
                                                  "\nEvery rank must build the same model.");
  }
}

void verify_same_values(ProcessGroup& group, const std::vector<at::Tensor>& tensors,
                        const std::vector<std::string>& names, const std::string& what) {
  std::vector<int64_t> hashes;
  for (const auto& t : tensors) {
    const at::Tensor bytes = t.detach().to(at::kCPU).contiguous();
    hashes.push_back(static_cast<int64_t>(
        Fnv1a()
            .add(std::string_view(static_cast<const char*>(bytes.data_ptr()), bytes.nbytes()))
            .value()));
  }
  if (hashes.empty()) return;
  auto all = allgather(group, at::tensor(hashes, at::kLong));
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::vector<int> differ;  // from rank 0
    for (int r = 1; r < group.size(); ++r) {
      if (all[r].data_ptr<int64_t>()[i] != all[0].data_ptr<int64_t>()[i]) differ.push_back(r);
    }
    if (differ.empty()) continue;
    throw InvalidArgument(
        group.error_context().about(differ),
        "'" + names.at(i) + "' (#" + std::to_string(i) + " of the " + what +
            ", the first that differs) holds other values on " +
            (differ.size() == 1 ? "rank " : "ranks ") + rank_list(differ) +
            " than on rank 0. Load the same state on every rank, or let DDP broadcast "
            "rank 0's (init_sync(true), the default).");
  }
}

void check_on_every_rank(ProcessGroup& group, const std::string& what,
                         const std::function<void()>& checks) {
  std::exception_ptr mine;
  try {
    checks();
  } catch (...) {
    mine = std::current_exception();
  }
  if (mine) {
    // This rank's own error, whatever the group does: a broken group, or
    // peers that never come, must not replace it with a communication error.
    try {
      ranks_flagging(group, true);
    } catch (...) {  // the others learn of it as they can
    }
    std::rethrow_exception(mine);
  }
  const std::vector<int> failed = ranks_flagging(group, false);
  if (failed.empty()) return;
  const bool one = failed.size() == 1;
  const std::string their = one ? "its" : "their";
  throw InvalidArgument(
      group.error_context().about(failed),
      std::string(one ? "rank " : "ranks ") + rank_list(failed) + " could not build " + what +
          " (" + their + " own error says why; see " + their + " output). Every rank stops here.");
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
