// Who is in the job: this process's member id, its heartbeat on the store,
// what it knows of the other members' liveness, and the formation of each
// generation (include/ddp/elastic.h, "How it works").
#pragma once

#include <ddp/elastic.h>
#include <ddp/store.h>

#include "base/mutex.h"
#include "elastic/generation_abort.h"
#include "elastic/record.h"
#include "rendezvous/job_secret.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace ddp::detail::elastic {

// Member ids from here on are taken from the store by processes without
// $RANK (joiners); launchers number their ranks below it.
constexpr int kFirstFreshId = 1000000;

class Membership {
 public:
  // Connects to the store at $MASTER_ADDR:$MASTER_PORT (held by ddp-store),
  // takes member id $RANK (or a fresh one when unset) and starts the
  // heartbeat. InvalidArgument: no store named, or the id held by another
  // live process; CommunicationError: the store does not answer.
  explicit Membership(const ElasticOptions& options);
  ~Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  int id() const { return id_; }

  // Blocks until a generation after `previous` that includes this process
  // is decided, and returns it (rank, members, who left and joined); one
  // of generation -1 once the job has finished without this process.
  // TimeoutError after reform_timeout naming who arrived, who is awaited
  // and the minimum.
  ElasticWorld form(const ElasticWorld& previous);

  // The job is done: a process still waiting to join goes home.
  void finish();

  // A fresh client of the store, for a generation's process group; the
  // store must answer within reform_timeout (or `patience`). With a job
  // secret, the job's keys through it are sealed (rendezvous/job_store.h),
  // as this process was admitted once at its start (admit_elastic).
  StorePtr connect() const;
  StorePtr connect(std::chrono::milliseconds patience) const;

  // From now on the heartbeat follows the liveness of `now`'s members and
  // looks for a process waiting to join the generation after it.
  void watch(const ElasticWorld& now);
  // True once such a process waits (the heartbeat looks every
  // heartbeat_interval), and there is room for it (max_world_size).
  bool change_wanted() const { return change_wanted_.load(std::memory_order_acquire); }
  // What the heartbeat calls when it finds a watched member gone: the
  // runner arms it with the generation's group.
  GenerationAbort& generation_abort() { return generation_abort_; }

 private:
  struct Liveness {
    int64_t beats = -1;
    std::chrono::steady_clock::time_point moved;
  };
  void heartbeat();
  // Whether member `id`'s process is gone: dead, or stopped with its
  // heartbeat still, on this host (running there: not gone); elsewhere, a
  // heartbeat that has not moved for dead_after.
  bool gone(const StorePtr& store, int id);
  // Reads `id`'s heartbeat counter into the liveness table.
  void observe(const StorePtr& store, int id);
  int64_t first_undecided_generation(const StorePtr& store) const;
  ElasticWorld form_after(const ElasticWorld& previous);
  // Generation n's decision; nullopt while there is none.
  std::optional<GenerationRecord> decision(int64_t n) const;
  // The live processes registered for generation n, in arrival order.
  std::vector<int> arrivals(int64_t n);
  GenerationRecord propose(const std::vector<int>& before, const std::vector<int>& arrived) const;
  // A client of the store, before the job's keys (admission's own): the
  // store must listen within `patience` and then answer within
  // `answer_within` (store_handshake.h).
  StorePtr connect_unadmitted(std::chrono::milliseconds patience,
                              std::chrono::milliseconds answer_within) const;

  const ElasticOptions options_;
  const std::string host_, pid_namespace_;
  std::string address_;
  int port_ = 0;
  std::optional<JobSecret> secret_;  // $DDP_JOB_SECRET
  std::string challenge_;            // the job's, once admitted ("" without a secret)
  StorePtr store_;  // the caller's thread's
  int id_ = -1;
  std::string me_;  // this process's member record: host, PID namespace, pid

  Mutex mutex_;
  std::map<int, Liveness> liveness_ DDP_GUARDED_BY(mutex_);
  std::vector<int> watched_ DDP_GUARDED_BY(mutex_);
  int64_t watched_generation_ DDP_GUARDED_BY(mutex_) = -1;
  bool stopping_ DDP_GUARDED_BY(mutex_) = false;
  CondVar wake_;
  std::atomic<bool> change_wanted_{false};
  GenerationAbort generation_abort_;
  std::thread heartbeat_;
};

}  // namespace ddp::detail::elastic
