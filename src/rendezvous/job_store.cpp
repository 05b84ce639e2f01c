#include "rendezvous/job_store.h"

#include <ddp/errors.h>

namespace ddp::detail {
namespace {

constexpr std::size_t kMacLength = 64;  // HMAC-SHA256 in hex

}  // namespace

JobStore::JobStore(StorePtr store, JobSecret secret, std::string challenge,
                   std::unique_ptr<Doorman> doorman)
    : c10d::PrefixStore(secret.key_prefix(challenge), std::move(store)),
      secret_(std::move(secret)),
      challenge_(std::move(challenge)),
      doorman_(std::move(doorman)) {}

std::string JobStore::value_mac(const std::string& key, const std::vector<uint8_t>& value) const {
  return secret_.mac("ddp store value\n" + challenge_ + "\n" + key + "\n" +
                     std::string(value.begin(), value.end()));
}

std::vector<uint8_t> JobStore::sealed(const std::string& key,
                                      const std::vector<uint8_t>& value) const {
  std::vector<uint8_t> bytes = value;
  const std::string mac = value_mac(key, value);
  bytes.insert(bytes.end(), mac.begin(), mac.end());
  return bytes;
}

std::vector<uint8_t> JobStore::opened(const std::string& key,
                                      const std::vector<uint8_t>& sealed) const {
  if (sealed.size() >= kMacLength) {
    const std::vector<uint8_t> value(sealed.begin(), sealed.end() - kMacLength);
    const std::string mac(sealed.end() - kMacLength, sealed.end());
    if (equal_in_constant_time(mac, value_mac(key, value))) return value;
  }
  throw CommunicationError(
      "the job's store holds a value under '" + key +
      "' that no rank of this job wrote (its MAC does not match the job secret): a process "
      "without the secret reached the store at MASTER_ADDR:MASTER_PORT and changed it. Keep "
      "strangers off that port (docs/security.md)");
}

void JobStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  c10d::PrefixStore::set(key, sealed(key, value));
}

std::vector<uint8_t> JobStore::get(const std::string& key) {
  return opened(key, c10d::PrefixStore::get(key));
}

std::vector<uint8_t> JobStore::compareSet(const std::string& key,
                                          const std::vector<uint8_t>& expected,
                                          const std::vector<uint8_t>& desired) {
  // Empty expected: "the key is absent", as the store takes it, unsealed.
  const std::vector<uint8_t> expected_bytes = expected.empty() ? expected : sealed(key, expected);
  return opened(key, c10d::PrefixStore::compareSet(key, expected_bytes, sealed(key, desired)));
}

}  // namespace ddp::detail
