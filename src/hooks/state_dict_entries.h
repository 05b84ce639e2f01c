// Entries of a HookStateDict (comm_hook.h): how the built-in hooks' states
// (PowerSGDState, AdaptiveCompressionState) write numbers and per-bucket
// tensors as named tensors, read them back, and nest one state's dict in
// another's. Reads throw InvalidArgument in `owner`'s name for an entry
// that is missing or malformed.
#pragma once

#include <ddp/comm_hook.h>
#include <ddp/errors.h>

#include <ATen/ATen.h>

#include <cstddef>
#include <map>
#include <string>

namespace ddp::detail {

using Entries = std::map<std::string, at::Tensor>;

inline at::Tensor int_entry(int64_t v) { return at::scalar_tensor(v, at::kLong); }
inline at::Tensor float_entry(double v) { return at::scalar_tensor(v, at::kDouble); }

[[noreturn]] inline void bad_state_dict(const std::string& owner, const std::string& what) {
  throw InvalidArgument(ErrorContext{-1, 0, "", owner + "::load_state_dict", {}},
                        what + ": not a " + owner + "'s state_dict");
}

inline const at::Tensor& entry(const Entries& from, const std::string& key,
                               const std::string& owner) {
  auto it = from.find(key);
  if (it == from.end() || !it->second.defined()) bad_state_dict(owner, "no '" + key + "'");
  return it->second;
}
inline int64_t read_int(const Entries& from, const std::string& key, const std::string& owner) {
  const at::Tensor& t = entry(from, key, owner);
  if (t.numel() != 1) bad_state_dict(owner, "'" + key + "' is not a number");
  return t.item<int64_t>();
}
inline double read_float(const Entries& from, const std::string& key, const std::string& owner) {
  const at::Tensor& t = entry(from, key, owner);
  if (t.numel() != 1) bad_state_dict(owner, "'" + key + "' is not a number");
  return t.item<double>();
}

// Bucket index -> tensor as "<prefix><index>" entries (CPU copies), and back.
inline void put_per_bucket(Entries& to, const std::string& prefix,
                           const std::map<size_t, at::Tensor>& memory) {
  for (const auto& [index, t] : memory)
    to[prefix + std::to_string(index)] = t.detach().cpu().clone();
}
inline std::map<size_t, at::Tensor> per_bucket(const Entries& from, const std::string& prefix,
                                               const std::string& owner) {
  std::map<size_t, at::Tensor> out;
  for (auto it = from.lower_bound(prefix); it != from.end(); ++it) {
    if (it->first.compare(0, prefix.size(), prefix) != 0) break;
    const std::string index = it->first.substr(prefix.size());
    if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos) {
      bad_state_dict(owner, "an entry '" + it->first + "' without a bucket index");
    }
    out[std::stoul(index)] = it->second.clone();
  }
  return out;
}

// `inner`'s entries under `prefix` in `outer`, and back.
inline void nest(HookStateDict& outer, const std::string& prefix, const HookStateDict& inner) {
  for (const auto& [k, t] : inner.shared) outer.shared[prefix + k] = t;
  for (const auto& [k, t] : inner.per_rank) outer.per_rank[prefix + k] = t;
}
inline HookStateDict nested(const HookStateDict& outer, const std::string& prefix) {
  HookStateDict inner;
  auto take = [&](const Entries& from, Entries& to) {
    for (auto it = from.lower_bound(prefix); it != from.end(); ++it) {
      if (it->first.compare(0, prefix.size(), prefix) != 0) break;
      to[it->first.substr(prefix.size())] = it->second;
    }
  };
  take(outer.shared, inner.shared);
  take(outer.per_rank, inner.per_rank);
  return inner;
}

}  // namespace ddp::detail
