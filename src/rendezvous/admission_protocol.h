// The keys and MAC messages of admission (rendezvous/admission.h), shared
// by the ranks that ask (admission.cpp) and rank 0, which answers
// (doorman.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace ddp::detail::admission {

// Plain character arrays, not std::string: rank 0's admission thread may be
// left blocked in a store call past the end of static destruction.
constexpr char kChallengeKey[] = "ddp/admission/challenge";
constexpr char kTicketsKey[] = "ddp/admission/tickets";
constexpr char kScheme[] = "hmac-sha256";
constexpr char kNoSecret[] = "none";
// The world size an elastic job's processes ask with and ddp-store answers
// for: any member id, any number (the membership protocol checks ids).
constexpr int kElasticWorldSize = 0;

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
// that neither can stand for the other, and the ticket, so that a request
// copied under another ticket proves nothing.
inline std::string admission_message(const char* label, const std::string& challenge,
                                     int64_t ticket, int rank, int world_size,
                                     const std::string& nonce) {
  return std::string(label) + "\n" + challenge + "\n" + std::to_string(ticket) + "\n" +
         std::to_string(rank) + "\n" + std::to_string(world_size) + "\n" + nonce;
}
constexpr char kProofLabel[] = "ddp admission proof";
constexpr char kAnswerLabel[] = "ddp admission answer";

// What a refusal for a missing or different secret tells the user to do.
constexpr char kSameSecretAdvice[] =
    "Start every rank with the same DDP_JOB_SECRET (ddprun sets one for all the ranks it "
    "starts; with other launchers, export it to every rank).";

}  // namespace ddp::detail::admission
