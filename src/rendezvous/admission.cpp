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

// Who asks, as its hello says it and as its errors name it; and who
// answers: rank 0, or ddp-store for an elastic job.
struct Asker {
  int rank;            // RANK; an elastic joiner: -1
  int world_size;      // WORLD_SIZE; elastic: admission::kElasticWorldSize
  ErrorContext self;   // this process, in its errors
  std::string opener;  // "rank 0" or "ddp-store"
  // The errors of admission name the process alone ("ddp: rank 1: this rank
  // has no job secret ...", as tests/multiprocess/secret_test.sh reads
  // them), with rank 0 as the peer at fault where its answer or silence is.
  ErrorContext blaming_opener() const {
    ErrorContext c = self;
    if (opener == "rank 0") c.peers = {0};
    return c;
  }
};

Asker rank_of_a_job(int rank, int world_size) {
  return Asker{rank, world_size, ErrorContext{rank, 0, "", "", {}}, "rank 0"};
}

// This process fails before asking: it leaves why for the others' errors.
[[noreturn]] void refuse_myself(const StorePtr& store, const Asker& me, const std::string& why) {
  const std::string sentence = why + ". " + std::string(admission::kSameSecretAdvice);
  const std::string subject = me.rank >= 0 ? "rank " + std::to_string(me.rank) : "a process";
  store->set(admission::refused_key(me.rank),
             store_bytes(subject + " (" + this_process() + ") " + sentence));
  throw InvalidArgument(me.blaming_opener(),
                        (me.opener == "rank 0" ? "this rank " : "this process ") + sentence);
}

std::string wait_for_value(const StorePtr& store, const std::string& key, const Asker& me,
                           Clock::time_point deadline, const std::string& what_is_late) {
  if (!wait_for_key(store, key, deadline)) {
    throw TimeoutError(me.blaming_opener(),
                       what_is_late + " before the rendezvous timeout. Check that " + me.opener +
                           " runs and that every " +
                           (me.opener == "rank 0" ? "rank" : "process") +
                           " has the same MASTER_ADDR and MASTER_PORT.");
  }
  return store_text(store->get(key));
}

ElasticAdmission open_job(const StorePtr& store, const std::function<StorePtr()>& reconnect,
                          int world_size, const std::optional<JobSecret>& secret,
                          const ErrorContext& self) {
  if (!secret) {
    store->set(admission::kChallengeKey, store_bytes(admission::kNoSecret));
    return {store, ""};
  }
  const std::string challenge = random_hex(16);
  StorePtr own;
  try {
    own = reconnect();
  } catch (const std::exception& e) {
    throw CommunicationError(self,
                             "cannot open a second connection to the job's store "
                             "(admissions are answered on it): " +
                                 std::string(e.what()));
  }
  auto doorman = std::make_unique<Doorman>(own, *secret, challenge, world_size);
  store->set(admission::kChallengeKey,
             store_bytes(std::string(admission::kScheme) + " " + challenge));
  return {c10::make_intrusive<JobStore>(store, *secret, challenge, std::move(doorman)), challenge};
}

ElasticAdmission join_job(const StorePtr& store, const Asker& me,
                          const std::optional<JobSecret>& secret, Clock::time_point deadline) {
  const std::string opened = wait_for_value(store, admission::kChallengeKey, me, deadline,
                                            me.opener + " did not open the job at the store");
  if (opened == admission::kNoSecret) {
    if (secret) {
      refuse_myself(store, me,
                    "holds a job secret (DDP_JOB_SECRET) but " + me.opener + " has none: " +
                        me.opener +
                        " was started without it, or the store belongs to another job");
    }
    return {store, ""};
  }
  const std::string scheme_prefix = std::string(admission::kScheme) + " ";
  if (opened.rfind(scheme_prefix, 0) != 0) {
    throw InvalidArgument(me.blaming_opener(),
                          me.opener + " asks for an admission scheme this build does not know ('" +
                              opened.substr(0, 40) + "'): build every " +
                              (me.opener == "rank 0" ? "rank" : "process") + " from the same ddp");
  }
  if (!secret) {
    refuse_myself(store, me,
                  "has no job secret (DDP_JOB_SECRET is unset) but " + me.opener +
                      " requires one");
  }
  const std::string challenge = opened.substr(scheme_prefix.size());
  const std::string nonce = random_hex(16);
  const std::string origin = this_process();
  const int64_t ticket = store->add(admission::kTicketsKey, 1);
  const std::string proof = secret->mac(admission::admission_message(
      admission::kProofLabel, challenge, ticket, me.rank, me.world_size, nonce));
  store->set(admission::hello_key(ticket),
             store_bytes(std::to_string(me.rank) + " " + std::to_string(me.world_size) + " " +
                         nonce + " " + proof + " " + origin));
  const std::string verdict =
      wait_for_value(store, admission::verdict_key(ticket), me, deadline,
                     me.opener + " did not answer this " +
                         (me.opener == "rank 0" ? "rank" : "process") + "'s request to join");
  // Answered: the request's keys go (an elastic job's store would keep two
  // per process that ever joined).
  store->deleteKey(admission::hello_key(ticket));
  store->deleteKey(admission::verdict_key(ticket));
  const std::string refused = "refused ";
  if (verdict.rfind(refused, 0) == 0) {
    throw InvalidArgument(me.blaming_opener(), me.opener + " refused this process (" + origin +
                                                   "): " + verdict.substr(refused.size()));
  }
  const std::string expected =
      "admitted " + secret->mac(admission::admission_message(admission::kAnswerLabel, challenge,
                                                             ticket, me.rank, me.world_size,
                                                             nonce));
  if (!equal_in_constant_time(verdict, expected)) {
    throw InvalidArgument(me.self,
                          "the store's answer does not prove that it holds this "
                          "job's secret: the store at MASTER_ADDR:MASTER_PORT belongs to another "
                          "job, or something other than " +
                              me.opener +
                              " answers there. Check MASTER_ADDR, MASTER_PORT and "
                              "DDP_JOB_SECRET.");
  }
  return {c10::make_intrusive<JobStore>(store, *secret, challenge), challenge};
}

}  // namespace

StorePtr admit(const StorePtr& store, const std::function<StorePtr()>& reconnect, int rank,
               int world_size, const std::optional<JobSecret>& secret, Clock::time_point deadline) {
  const Asker me = rank_of_a_job(rank, world_size);
  if (rank == 0) return open_job(store, reconnect, world_size, secret, me.self).store;
  return join_job(store, me, secret, deadline).store;
}

ElasticAdmission open_elastic_job(const StorePtr& store,
                                  const std::function<StorePtr()>& reconnect,
                                  const std::optional<JobSecret>& secret) {
  return open_job(store, reconnect, admission::kElasticWorldSize, secret,
                  ErrorContext{-1, 0, "", "ddp-store", {}});
}

ElasticAdmission admit_elastic(const StorePtr& store, const ErrorContext& context,
                               const std::optional<JobSecret>& secret,
                               Clock::time_point deadline) {
  // Member ids are the membership protocol's: the hello names none.
  return join_job(store, Asker{-1, admission::kElasticWorldSize, context, "ddp-store"}, secret,
                  deadline);
}

StorePtr elastic_job_store(const StorePtr& store, const std::optional<JobSecret>& secret,
                           const std::string& challenge) {
  if (!secret || challenge.empty()) return store;
  return c10::make_intrusive<JobStore>(store, *secret, challenge);
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
