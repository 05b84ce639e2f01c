// Rank 0's side of admission (rendezvous/admission.h): a thread that
// answers each request on the store — admitted, with a MAC that proves rank
// 0 holds the secret, or refused, saying why — from the job's start until
// the job's store is destroyed. A process is refused when its proof does
// not match, its world size differs, its rank is out of range or already
// admitted; a refusal never harms the job.
#pragma once

#include "rendezvous/job_secret.h"

#include <ddp/store.h>

#include <memory>
#include <string>

namespace ddp::detail {

class Doorman {
 public:
  // Starts answering on `store`, a connection to the job's store that is
  // the doorman's alone (a TCPStore client serializes its calls, and the
  // rank's own may block in long waits). `world_size` 0
  // (admission::kElasticWorldSize): an elastic job's, answered by
  // ddp-store for its whole life, any member id admitted.
  Doorman(StorePtr store, JobSecret secret, std::string challenge, int world_size);
  // Stops the thread; one blocked on a store that stopped answering is left
  // behind (it owns what it uses) after 2 s.
  ~Doorman();
  Doorman(const Doorman&) = delete;
  Doorman& operator=(const Doorman&) = delete;

 private:
  struct Control;
  std::shared_ptr<Control> control_;
};

}  // namespace ddp::detail
