#include "elastic/store_gc.h"

#include "base/store_values.h"
#include "compat/torch_compat.h"
#include "elastic/membership.h"
#include "elastic/record.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ddp::detail::elastic {

namespace {

std::optional<GenerationRecord> decision(c10d::Store& store, int64_t n) {
  const std::string k = generation_key(n, "decided");
  if (!store.check({k})) return std::nullopt;
  return GenerationRecord::decode(store_text(store.get(k)));
}

int64_t stored_number(c10d::Store& store, const std::string& key) {
  if (!store.check({key})) return 0;
  try {
    return std::stoll(store_text(store.get(key)));
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

int64_t collect_generations(c10d::Store& store, int64_t latest) {
  const int64_t floor = latest - 1;
  // Where an earlier pass got to: one that failed part-way goes on here.
  const int64_t collected = stored_number(store, collected_key());
  if (floor <= collected) return 0;
  std::set<int> staying;
  for (int64_t n : {floor, latest}) {
    if (const auto r = decision(store, n)) staying.insert(r->members.begin(), r->members.end());
  }
  // First the floor: a member that reads it finds every generation from it.
  if (stored_number(store, floor_key()) < floor) {
    store.set(floor_key(), store_bytes(std::to_string(floor)));
  }
  const std::optional<std::vector<std::string>> listed = compat::list_keys(store);
  int64_t deleted = 0;
  auto remove = [&](const std::string& k) { deleted += store.deleteKey(k) ? 1 : 0; };
  for (int64_t n = collected; n < floor; ++n) {
    if (const auto record = decision(store, n)) {
      // Fresh ids only: each is taken once from a counter, so a process
      // that holds one is the one that left. A launcher's id may be given
      // again to a new process, whose duplicate check needs the old key.
      for (int id : record->left) {
        if (id < kFirstFreshId || staying.count(id)) continue;
        remove(member_key(id));
        remove(heartbeat_key(id));
      }
    }
    const std::string count = generation_key(n, "count");
    if (store.check({count})) {
      const int64_t slots = store.add(count, 0);
      for (int64_t k = 1; k <= slots; ++k) remove(generation_key(n, "slot/" + std::to_string(k)));
      remove(count);
    }
    remove(generation_key(n, "decided"));
    if (listed) {
      const std::string prefix = generation_key(n, "");
      for (const std::string& k : *listed) {
        if (k.compare(0, prefix.size(), prefix) == 0) remove(k);
      }
    }
    store.set(collected_key(), store_bytes(std::to_string(n + 1)));
  }
  return deleted;
}

}  // namespace ddp::detail::elastic
