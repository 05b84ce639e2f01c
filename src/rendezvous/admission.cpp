#include "rendezvous/admission.h"

#include "base/arrival.h"
#include "base/store_values.h"
#include "rendezvous/admission_protocol.h"
#include "rendezvous/doorman.h"
#include "rendezvous/job_store.h"

#include <ddp/errors.h>

#include <unistd.h>

#include <memory>
#include <utility>
#include <vector>

namespace ddp::detail {
namespace {

using Clock = std::chrono::steady_clock;

std::string this_process() {
  char host[256] = "unknown-host";
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + ":" + std::to_string(getpid());
}

// The errors of admission name the rank alone ("ddp: rank 1: this rank has
// no job secret ..."), as tests/multiprocess/secret_test.sh reads them;
// `peers`: rank 0 where its answer (or its silence) is the cause.
ErrorContext who(int rank, std::vector<int> peers = {}) {
  return ErrorContext{rank, 0, "", "", std::move(peers)};
}

// This rank fails before asking: it leaves why for the others' errors.
[[noreturn]] void refuse_myself(const StorePtr& store, int rank, const std::string& why) {
  const std::string sentence = why + ". " + std::string(admission::kSameSecretAdvice);
  store->set(admission::refused_key(rank),
             store_bytes("rank " + std::to_string(rank) + " (" + this_process() + ") " + sentence));
  throw InvalidArgument(who(rank, {0}), "this rank " + sentence);
}

std::string wait_for_value(const StorePtr& store, const std::string& key, int rank,
                           Clock::time_point deadline, const std::string& what_is_late) {
  if (!wait_for_key(store, key, deadline)) {
    throw TimeoutError(who(rank, {0}), what_is_late +
                                           " before the rendezvous timeout. Check that rank 0 runs "
                                           "and that every rank has the same MASTER_ADDR and "
                                           "MASTER_PORT.");
  }
  return store_text(store->get(key));
}

StorePtr open_job(const StorePtr& store, const std::function<StorePtr()>& reconnect, int world_size,
                  const std::optional<JobSecret>& secret) {
  if (!secret) {
    store->set(admission::kChallengeKey, store_bytes(admission::kNoSecret));
    return store;
  }
  const std::string challenge = random_hex(16);
  StorePtr own;
  try {
    own = reconnect();
  } catch (const std::exception& e) {
    throw CommunicationError(who(0),
                             "cannot open a second connection to the job's store "
                             "(rank 0 answers admissions on it): " +
                                 std::string(e.what()));
  }
  auto doorman = std::make_unique<Doorman>(own, *secret, challenge, world_size);
  store->set(admission::kChallengeKey,
             store_bytes(std::string(admission::kScheme) + " " + challenge));
  return c10::make_intrusive<JobStore>(store, *secret, challenge, std::move(doorman));
}

StorePtr join_job(const StorePtr& store, int rank, int world_size,
                  const std::optional<JobSecret>& secret, Clock::time_point deadline) {
  const std::string opened = wait_for_value(store, admission::kChallengeKey, rank, deadline,
                                            "rank 0 did not open the job at the store");
  if (opened == admission::kNoSecret) {
    if (secret) {
      refuse_myself(store, rank,
                    "holds a job secret (DDP_JOB_SECRET) but rank 0 has none: rank 0 was started "
                    "without it, or the store belongs to another job");
    }
    return store;
  }
  const std::string scheme_prefix = std::string(admission::kScheme) + " ";
  if (opened.rfind(scheme_prefix, 0) != 0) {
    throw InvalidArgument(who(rank, {0}),
                          "rank 0 asks for an admission scheme this build does not know ('" +
                              opened.substr(0, 40) + "'): build every rank from the same ddp");
  }
  if (!secret) {
    refuse_myself(store, rank,
                  "has no job secret (DDP_JOB_SECRET is unset) but rank 0 requires one");
  }
  const std::string challenge = opened.substr(scheme_prefix.size());
  const std::string nonce = random_hex(16);
  const std::string origin = this_process();
  const int64_t ticket = store->add(admission::kTicketsKey, 1);
  const std::string proof = secret->mac(admission::admission_message(
      admission::kProofLabel, challenge, ticket, rank, world_size, nonce));
  store->set(admission::hello_key(ticket),
             store_bytes(std::to_string(rank) + " " + std::to_string(world_size) + " " + nonce +
                         " " + proof + " " + origin));
  const std::string verdict = wait_for_value(store, admission::verdict_key(ticket), rank, deadline,
                                             "rank 0 did not answer this rank's request "
                                             "to join");
  const std::string refused = "refused ";
  if (verdict.rfind(refused, 0) == 0) {
    throw InvalidArgument(who(rank, {0}), "rank 0 refused this process (" + origin +
                                              "): " + verdict.substr(refused.size()));
  }
  const std::string expected =
      "admitted " + secret->mac(admission::admission_message(admission::kAnswerLabel, challenge,
                                                             ticket, rank, world_size, nonce));
  if (!equal_in_constant_time(verdict, expected)) {
    throw InvalidArgument(who(rank),
                          "the store's answer does not prove that it holds this "
                          "job's secret: the store at MASTER_ADDR:MASTER_PORT belongs to another "
                          "job, or something other than rank 0 answers there. Check MASTER_ADDR, "
                          "MASTER_PORT and DDP_JOB_SECRET.");
  }
  return c10::make_intrusive<JobStore>(store, *secret, challenge);
}

}  // namespace

StorePtr admit(const StorePtr& store, const std::function<StorePtr()>& reconnect, int rank,
               int world_size, const std::optional<JobSecret>& secret, Clock::time_point deadline) {
  if (rank == 0) return open_job(store, reconnect, world_size, secret);
  return join_job(store, rank, world_size, secret, deadline);
}

std::string admission_refusals(const StorePtr& store, int world_size) {
  std::string notes;
  for (int r = 0; r < world_size; ++r) {
    const std::string key = admission::refused_key(r);
    if (store->check({key})) notes += " " + store_text(store->get(key));
  }
  return notes.empty() ? "" : " Refused at admission:" + notes;
}

}  // namespace ddp::detail
