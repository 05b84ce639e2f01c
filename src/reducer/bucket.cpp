#include <ddp/bucket.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

namespace ddp {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<at::Tensor>& tensors,
                                                const std::vector<size_t>& order,
                                                int64_t first_cap_bytes, int64_t cap_bytes) {
  return assign_buckets(tensors, order, std::vector<int64_t>{first_cap_bytes, cap_bytes});
}

std::vector<std::vector<size_t>> assign_buckets(const std::vector<at::Tensor>& tensors,
                                                const std::vector<size_t>& order,
                                                const std::vector<int64_t>& caps_bytes) {
  struct Open {
    std::vector<size_t> members;
    int64_t bytes = 0;
    int closed = 0;  // buckets already closed for this key
  };
  // Key: (dtype, device type, device index).
  std::map<std::tuple<int, int, int>, Open> open;
  std::vector<std::vector<size_t>> done;
  auto close = [&](Open& o) {
    if (o.members.empty()) return;
    done.push_back(std::move(o.members));
    o.members.clear();
    o.bytes = 0;
    ++o.closed;
  };
  for (size_t index : order) {
    const at::Tensor& t = tensors.at(index);
    Open& o = open[{static_cast<int>(t.scalar_type()), static_cast<int>(t.device().type()),
                    t.device().index()}];
    const int64_t cap = caps_bytes.at(std::min<size_t>(o.closed, caps_bytes.size() - 1));
    const int64_t bytes = static_cast<int64_t>(t.numel()) * t.element_size();
    if (bytes > cap) {  // too large to share: a bucket of its own, closed at once
      close(o);
      o.members.push_back(index);
      close(o);
      continue;
    }
    o.members.push_back(index);
    o.bytes += bytes;
    if (o.bytes >= cap) close(o);
  }
  for (auto& [key, o] : open) close(o);

  std::vector<size_t> position(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  std::sort(done.begin(), done.end(), [&](const auto& a, const auto& b) {
    return position[a.front()] < position[b.front()];
  });
  return done;
}

std::vector<size_t> reverse_order(size_t count) {
  std::vector<size_t> order(count);
  std::iota(order.rbegin(), order.rend(), 0);
  return order;
}

}  // namespace ddp
