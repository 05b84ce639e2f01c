// The job's keys on the rendezvous store once a rank is admitted
// (rendezvous/admission.h): under a prefix derived from the job secret and
// the job's challenge, and every value set through it followed by a MAC over
// (challenge, key, value) that get() checks. PyTorch 2.x's TCPStore lists
// its keys to any client, so a stranger can read the job's values; it
// cannot change one unnoticed: get() of a value it wrote is a
// CommunicationError naming the key. Counters (add) carry no MAC: a
// stranger can disturb them, which fails or stalls the job (its timeouts
// apply), never mixes data. set(), get() and compareSet() (an elastic
// job's decisions: sealing is deterministic, so the expected value seals to
// the stored bytes) are what the job uses; the other value calls (2.x's
// multiGet, multiSet, append) are not MAC'd and must not be used on it.
#pragma once

#include "rendezvous/doorman.h"
#include "rendezvous/job_secret.h"

#include <ddp/store.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <memory>
#include <string>
#include <vector>

namespace ddp::detail {

class JobStore : public c10d::PrefixStore {
 public:
  // `doorman`: rank 0's admission thread, kept alive as long as the store.
  JobStore(StorePtr store, JobSecret secret, std::string challenge,
           std::unique_ptr<Doorman> doorman = nullptr);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key) override;
  using c10d::PrefixStore::compareSet;
  // Returns the value now stored (checked), as the store's compareSet does.
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;

 private:
  std::string value_mac(const std::string& key, const std::vector<uint8_t>& value) const;
  std::vector<uint8_t> sealed(const std::string& key, const std::vector<uint8_t>& value) const;
  // The value of `sealed` bytes under `key`; CommunicationError if no rank wrote them.
  std::vector<uint8_t> opened(const std::string& key, const std::vector<uint8_t>& sealed) const;

  const JobSecret secret_;
  const std::string challenge_;
  std::unique_ptr<Doorman> doorman_;
};

}  // namespace ddp::detail
