#include "rendezvous/job_secret.h"

#include "base/env.h"

#include <ddp/errors.h>

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace ddp::detail {
namespace {

std::string to_hex(const unsigned char* bytes, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    hex[2 * i] = kDigits[bytes[i] >> 4];
    hex[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return hex;
}

// OpenSSL frees its state in an atexit handler of its own, but a MAC may be
// needed after that: a process group torn down in static destruction still
// writes to the job's store (rendezvous/job_store.h). So the library is set
// up without that handler, once, before its first use.
void set_up_openssl() {
  static const bool set_up = OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;
  if (!set_up) throw Error("OpenSSL's libcrypto failed to initialise");
}

}  // namespace

std::optional<JobSecret> JobSecret::from_env() {
  auto key = env_string(kJobSecretVariable);
  if (!key) return std::nullopt;
  if (key->size() < kMinJobSecretLength) {
    throw InvalidArgument("environment variable " + std::string(kJobSecretVariable) + " is " +
                          std::to_string(key->size()) +
                          " characters long; a job secret needs at least " +
                          std::to_string(kMinJobSecretLength) +
                          " random characters (e.g. DDP_JOB_SECRET=$(openssl rand -hex 16), the "
                          "same on every rank; ddprun makes one when it is unset)");
  }
  return JobSecret(std::move(*key));
}

std::string JobSecret::mac(const std::string& message) const {
  set_up_openssl();
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest,
           &length) == nullptr) {
    throw Error("OpenSSL's HMAC-SHA256 failed");
  }
  return to_hex(digest, length);
}

std::string JobSecret::key_prefix(const std::string& challenge) const {
  return "ddp/job/" + mac("ddp job key prefix\n" + challenge).substr(0, 32);
}

std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> buffer(bytes);
  std::size_t filled = 0;
  while (filled < bytes) {
    const ssize_t got = getrandom(buffer.data() + filled, bytes - filled, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error(std::string("getrandom failed: ") + std::strerror(errno));
    filled += static_cast<std::size_t>(got);
  }
  return to_hex(buffer.data(), bytes);
}

bool equal_in_constant_time(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace ddp::detail
