#include "reducer/static_graph.h"

#include <ddp/errors.h>
#include <ddp/process_group.h>

namespace ddp::detail {

void StaticGraph::learn(const std::vector<int>& arrivals) {
  learned_ = true;
  expected_arrivals_ = arrivals;
  for (size_t i = 0; i < arrivals.size(); ++i) {
    if (arrivals[i] == 0) unused_.push_back(i);
  }
}

bool StaticGraph::complete(size_t i, int arrivals, const std::string& name,
                           const ProcessGroup& group) const {
  if (arrivals < expected_arrivals_[i]) return false;  // more to come
  if (arrivals > expected_arrivals_[i]) {
    throw InvalidArgument(
        group.error_context(),
        "parameter #" + std::to_string(i) + " '" + name + "' got " + std::to_string(arrivals) +
            " gradients in this backward pass but " + std::to_string(expected_arrivals_[i]) +
            " in the first one: the graph is not static; construct DistributedDataParallel "
            "without static_graph");
  }
  return true;
}

}  // namespace ddp::detail
