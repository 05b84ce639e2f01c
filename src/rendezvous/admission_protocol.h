// The keys and MAC messages of admission (rendezvous/admission.h), shared
// by the ranks that ask (admission.cpp) and rank 0, which answers
// (doorman.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace ddp::detail::admission {

inline const std::string kChallengeKey = "ddp/admission/challenge";
inline const std::string kTicketsKey = "ddp/admission/tickets";
inline const std::string kScheme = "hmac-sha256";
inline const std::string kNoSecret = "none";

inline std::string hello_key(int64_t ticket) {
  return "ddp/admission/hello/" + std::to_string(ticket);
}
inline std::string verdict_key(int64_t ticket) {
  return "ddp/admission/verdict/" + std::to_string(ticket);
}
inline std::string refused_key(int rank) {
  return "ddp/admission/refused/" + std::to_string(rank);
}

// What a rank's proof and rank 0's answer are MACs of: distinct labels, so
// that neither can stand for the other.
inline std::string proof_message(const std::string& challenge, int rank, int world_size,
                                 const std::string& nonce) {
  return "ddp admission proof\n" + challenge + "\n" + std::to_string(rank) + "\n" +
         std::to_string(world_size) + "\n" + nonce;
}
inline std::string answer_message(const std::string& challenge, int rank, int world_size,
                                  const std::string& nonce) {
  return "ddp admission answer\n" + challenge + "\n" + std::to_string(rank) + "\n" +
         std::to_string(world_size) + "\n" + nonce;
}

// What a refusal for a missing or different secret tells the user to do.
inline const std::string kSameSecretAdvice =
    "Start every rank with the same DDP_JOB_SECRET (ddprun sets one for all the ranks it "
    "starts; with other launchers, export it to every rank).";

}  // namespace ddp::detail::admission
