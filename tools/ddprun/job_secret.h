// The job's secret (DDP_JOB_SECRET, docs/security.md): every rank of one
// job holds the same one and proves it at the rendezvous, so that no process
// without it joins. ddprun makes a fresh one for a one-node job whose
// environment has none; the ranks inherit it.
#pragma once

#include <string>

namespace ddprun {

struct Options;

// Sets DDP_JOB_SECRET in ddprun's environment to 32 random hex characters
// when it is unset and the job has one node (one ddprun starts all its
// ranks). Returns a note for the user when the job stays without one (a
// multi-node job: each node's ddprun would make a different secret), or an
// error (no randomness): "" otherwise.
std::string ensure_job_secret(const Options& opts, bool& failed);

}  // namespace ddprun
