#include "collectives/gloo/store_adapter.h"

#include "base/setup_cancel.h"

#include <ddp/errors.h>

#include <algorithm>
#include <thread>

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

// Polled rather than the store's blocking wait, so that a cancelled set-up
// (base/setup_cancel.h: a peer died meanwhile) ends it now.
void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (!store_->check(keys)) {
    throw_if_setup_cancelled();
    if (timeout.count() > 0 && std::chrono::steady_clock::now() >= deadline) {  // 0: none
      std::string missing;
      for (const auto& key : keys) {
        if (!store_->check({key})) missing += (missing.empty() ? "'" : ", '") + key + "'";
      }
      throw TimeoutError("Gloo's rendezvous waited " + std::to_string(timeout.count()) +
                         " ms for key(s) " + missing + " that the other ranks did not set");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

}  // namespace ddp::detail
