// A job's identity: the secret every rank of one job holds (DDP_JOB_SECRET;
// ddprun sets a fresh one per job). It never leaves the process: ranks prove
// they hold it with HMAC-SHA256 over a challenge (rendezvous/admission.h),
// and the job's store keys live under a prefix derived from it, their
// values carrying MACs (rendezvous/job_store.h). docs/security.md has the
// threat model.
#pragma once

#include <optional>
#include <string>

namespace ddp::detail {

// The environment variable that carries the secret.
constexpr const char* kJobSecretVariable = "DDP_JOB_SECRET";
// Shorter secrets are refused: 16 characters of `openssl rand -hex 16` are
// 64 bits; ddprun's are 32 hex characters (128 bits).
constexpr std::size_t kMinJobSecretLength = 16;

class JobSecret {
 public:
  // Any key; from_env() is the checked way in.
  explicit JobSecret(std::string key) : key_(std::move(key)) {}

  // $DDP_JOB_SECRET; nullopt when unset or empty. Shorter than
  // kMinJobSecretLength: InvalidArgument naming the variable (never its
  // value) and how to make a good one.
  static std::optional<JobSecret> from_env();

  // HMAC-SHA256(secret, message) in lower-case hex (64 characters).
  std::string mac(const std::string& message) const;

  // The prefix of the job's store keys: "ddp/job/" and 32 hex characters
  // of a MAC over the job's challenge, the same on every rank of the job,
  // unrelated for another secret or another job, telling nothing of the
  // secret itself.
  std::string key_prefix(const std::string& challenge) const;

 private:
  std::string key_;
};

// `bytes` random bytes from the kernel's generator, in hex.
std::string random_hex(std::size_t bytes);

// a == b, in a time that depends on the lengths only (MAC comparisons).
bool equal_in_constant_time(const std::string& a, const std::string& b);

}  // namespace ddp::detail
