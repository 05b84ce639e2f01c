#include "collectives/gloo/store_adapter.h"

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

void GlooStore::wait(const std::vector<std::string>& keys) { store_->wait(keys); }

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  store_->wait(keys, timeout);
}

}  // namespace ddp::detail
