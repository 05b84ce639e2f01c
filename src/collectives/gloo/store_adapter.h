// Adapts a c10d::Store (TCPStore, FileStore, HashStore) to the store
// interface Gloo's rendezvous uses to exchange connection addresses. Its
// waits poll, and end when this process's set-ups are cancelled
// (base/setup_cancel.h).
#pragma once

#include <ddp/store.h>

#include <gloo/rendezvous/store.h>

namespace ddp::detail {

class GlooStore : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(StorePtr store);
  ~GlooStore() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  StorePtr store_;
};

}  // namespace ddp::detail
