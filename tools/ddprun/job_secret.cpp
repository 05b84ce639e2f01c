#include "job_secret.h"

#include "options.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ddprun {

std::string ensure_job_secret(const Options& opts, bool& failed) {
  failed = false;
  const char* given = std::getenv("DDP_JOB_SECRET");
  if (given != nullptr && *given != '\0') return "";
  if (opts.join) {
    return "DDP_JOB_SECRET is not set: a job whose store has a secret (ddprun --elastic makes "
           "one) refuses these ranks; export the job's DDP_JOB_SECRET here (docs/security.md)";
  }
  if (opts.nnodes > 1) {
    return "DDP_JOB_SECRET is not set: the ranks of this multi-node job meet without "
           "authentication; set the same DDP_JOB_SECRET (e.g. $(openssl rand -hex 16)) on "
           "every node (docs/security.md)";
  }
  unsigned char bytes[16];
  std::size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t got = getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      failed = true;
      return std::string("cannot make a job secret: getrandom: ") + std::strerror(errno);
    }
    filled += static_cast<std::size_t>(got);
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string secret;
  for (unsigned char b : bytes) {
    secret += kDigits[b >> 4];
    secret += kDigits[b & 0xf];
  }
  setenv("DDP_JOB_SECRET", secret.c_str(), 1);
  return "";
}

}  // namespace ddprun
