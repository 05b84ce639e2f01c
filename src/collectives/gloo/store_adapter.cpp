#include "collectives/gloo/store_adapter.h"

#include "base/arrival.h"

#include <ddp/errors.h>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace ddp::detail {

GlooStore::GlooStore(StorePtr store) : store_(std::move(store)) {}
GlooStore::~GlooStore() = default;

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, std::vector<uint8_t>(data.begin(), data.end()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  auto value = store_->get(key);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStore::wait(const std::vector<std::string>& keys) { wait(keys, store_->getTimeout()); }

// Polled (base/arrival.h) rather than the store's blocking wait, so that a
// cancelled set-up (base/setup_cancel.h: a peer died meanwhile) ends it now.
void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  const auto deadline = timeout.count() > 0  // 0: none
                            ? std::chrono::steady_clock::now() + timeout
                            : std::chrono::steady_clock::time_point::max();
  if (wait_for_keys(store_, keys, deadline)) return;
  std::string missing;
  for (const auto& key : keys) {
    if (!store_->check({key})) missing += (missing.empty() ? "'" : ", '") + key + "'";
  }
  throw TimeoutError("Gloo's rendezvous waited " + std::to_string(timeout.count()) +
                     " ms for key(s) " + missing + " that the other ranks did not set");
}

}  // namespace ddp::detail
