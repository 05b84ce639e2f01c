// Admission: the first step of a rendezvous on a TCP store, before any of
// the job's keys is read or written. Rank 0 opens the job with a fresh
// challenge; every other rank proves that it holds the job's secret
// (rendezvous/job_secret.h) by a MAC over the challenge, its ticket, its
// rank and a nonce of its own, and checks rank 0's answer, a MAC too: the
// secret never crosses the network, neither can be replayed under another
// ticket or into another job, and a rank cannot be fooled by a store that
// does not hold the secret. Rank 0
// answers on a thread of its own for as long as the job's store lives, so a
// process that connects mid-job is refused as one that connects early is.
//
// Keys (the only ones outside the job's prefix), under "ddp/admission/":
//   challenge     "hmac-sha256 <challenge>", or "none" when rank 0 has no
//                 secret (then nobody is checked, as before secrets)
//   tickets       a counter: each request takes a ticket number T
//   hello/T       "<rank> <world size> <nonce> <proof> <host>:<pid>"; the
//                 proof is a MAC over (challenge, T, rank, world size, nonce)
//   verdict/T     "admitted <answer>" (a MAC over the same fields) or
//                 "refused <why>"; the asker deletes hello/T and verdict/T
//                 once it has read the verdict
//   refused/R     why the last process claiming rank R was refused, a
//                 sentence (for the rendezvous's timeout error on every rank)
// A rank with a secret facing "none", or without one facing a challenge,
// leaves refused/R itself and fails at once.
#pragma once

#include "rendezvous/job_secret.h"

#include <ddp/errors.h>
#include <ddp/store.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace ddp::detail {

// Admits this rank, which holds `secret` (JobSecret::from_env(), or none).
// Returns the store that the job's keys go through: `store` itself when
// rank 0 has no secret, else a JobStore on it (rendezvous/job_store.h;
// rank 0's keeps its admission thread, on a connection of its own from
// `reconnect`, for as long as the JobStore lives).
// InvalidArgument on the rank refused (naming why and what to set);
// TimeoutError at `deadline` when rank 0 does not open the job or answer.
StorePtr admit(const StorePtr& store, const std::function<StorePtr()>& reconnect, int rank,
               int world_size, const std::optional<JobSecret>& secret,
               std::chrono::steady_clock::time_point deadline);

// Elastic jobs (ddp/elastic.h): ddp-store, which outlives every member,
// opens the job and answers admissions for as long as it runs; a member is
// admitted once, with the same proof, as world size 0 (any member id: the
// membership protocol checks them), and wraps its later connections with
// the same challenge (elastic_job_store), without asking again.
struct ElasticAdmission {
  StorePtr store;         // the job's keys: a JobStore, or the store itself without a secret
  std::string challenge;  // "" without a secret
};
// ddp-store's side, on its own client `store`; `reconnect`: a second
// connection for the admission thread.
ElasticAdmission open_elastic_job(const StorePtr& store,
                                  const std::function<StorePtr()>& reconnect,
                                  const std::optional<JobSecret>& secret);
// A member's side: `context` names it in errors. The refusals and timeouts
// of admit().
ElasticAdmission admit_elastic(const StorePtr& store, const ErrorContext& context,
                               const std::optional<JobSecret>& secret,
                               std::chrono::steady_clock::time_point deadline);
// Another connection of an admitted member, as admit_elastic's store.
StorePtr elastic_job_store(const StorePtr& store, const std::optional<JobSecret>& secret,
                           const std::string& challenge);

// Why ranks were refused, as a sentence to append to the rendezvous's
// timeout error ("" when none was).
std::string admission_refusals(const StorePtr& store, int world_size);

}  // namespace ddp::detail
