#include "elastic/membership.h"

#include "base/env.h"
#include "base/store_values.h"
#include "collectives/host_identity.h"
#include "collectives/shm/peers.h"
#include "compat/torch_compat.h"
#include "elastic/record.h"
#include "rendezvous/admission.h"
#include "rendezvous/store_handshake.h"

#include <ddp/errors.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

namespace ddp::detail::elastic {
namespace {

using Clock = std::chrono::steady_clock;

using detail::store_bytes;
using detail::store_text;

// "ddp: elastic member 3: ...": the member's id is no rank of a group.
ErrorContext member(int id, std::vector<int> peers = {}) {
  return ErrorContext{-1, 0, "", "elastic member " + std::to_string(id), std::move(peers)};
}

// The member's process, as published at start: host, PID namespace, pid.
struct ProcessInfo {
  std::string host, pid_namespace;
  int32_t pid = 0;
};

std::string encode(const ProcessInfo& p) {
  return p.host + "\n" + p.pid_namespace + "\n" + std::to_string(p.pid);
}

ProcessInfo decode_process(const std::string& s) {
  ProcessInfo p;
  std::istringstream in(s);
  std::string pid;
  std::getline(in, p.host);
  std::getline(in, p.pid_namespace);
  std::getline(in, pid);
  p.pid = static_cast<int32_t>(std::atol(pid.c_str()));
  return p;
}

bool contains(const std::vector<int>& ids, int id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// "0,2" (ascending) or "none".
std::string list(std::vector<int> ids) {
  std::sort(ids.begin(), ids.end());
  return ids.empty() ? "none" : GenerationRecord::join(ids);
}

}  // namespace

Membership::Membership(const ElasticOptions& options)
    : options_(options), host_(host_identity()), pid_namespace_(shm::pid_namespace()) {
  const auto addr = env_string("MASTER_ADDR");
  const auto port = env_int("MASTER_PORT", 1, 65535);
  const auto rank = env_int("RANK", 0, kFirstFreshId - 1);
  if (!addr || !port) {
    throw InvalidArgument(
        "elastic training needs the store that outlives its members: set MASTER_ADDR and "
        "MASTER_PORT to a running ddp-store (ddprun --elastic starts one; by hand: ddp-store "
        "--port P)");
  }
  address_ = *addr;
  port_ = static_cast<int>(*port);
  // Admitted by ddp-store once: a process without the job's secret is
  // refused here and can write nothing the members would read.
  secret_ = JobSecret::from_env();
  ElasticAdmission admitted =
      // The first contact: a port whose program never answers is told
      // apart within seconds (store_handshake.h).
      admit_elastic(connect_unadmitted(options_.reform_timeout(), kStoreHandshake),
                    ErrorContext{-1, 0, "", "elastic", {}}, secret_,
                    Clock::now() + options_.reform_timeout());
  challenge_ = admitted.challenge;
  store_ = std::move(admitted.store);
  // A process with no $RANK (a joiner) takes an id no launcher gives.
  id_ = rank ? static_cast<int>(*rank)
             : kFirstFreshId + static_cast<int>(store_->add(key("next_id"), 1)) - 1;
  me_ = encode({host_, pid_namespace_, static_cast<int32_t>(getpid())});
  const std::string& me = me_;
  const std::string holder =
      store_text(store_->compareSet(member_key(id_), {}, store_bytes(me)));
  if (holder != me) {
    const ProcessInfo other = decode_process(holder);
    const bool alive = other.host != host_ || other.pid_namespace != pid_namespace_ ||
                       shm::process_state(other.pid) != shm::ProcessState::DEAD;
    if (alive) {
      throw InvalidArgument(member(id_),
                            "member id " + std::to_string(id_) + " is held by process " +
                                std::to_string(other.pid) + " on " +
                                (other.host == host_ ? "this host" : "another host") +
                                ": give every process of an elastic job its own RANK, or none");
    }
    store_->set(member_key(id_), store_bytes(me));  // the id of a dead process
  }
  heartbeat_ = std::thread([this] { heartbeat(); });
}

Membership::~Membership() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
}

StorePtr Membership::connect() const { return connect(options_.reform_timeout()); }

StorePtr Membership::connect(std::chrono::milliseconds patience) const {
  // ddp-store answered this process before: a slow answer now is a loaded
  // host, not another program, and gets the whole patience (at least the
  // first contact's bound).
  return elastic_job_store(connect_unadmitted(patience, std::max(patience, kStoreHandshake)),
                           secret_, challenge_);
}

StorePtr Membership::connect_unadmitted(std::chrono::milliseconds patience,
                                        std::chrono::milliseconds answer_within) const {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(port_);
  opts.isServer = false;
  opts.waitWorkers = false;
  opts.timeout = std::chrono::milliseconds(30000);
  compat::use_classic_tcp_store(opts);
  const ErrorContext elastic{-1, 0, "", "elastic", {}};
  const std::string who = "the store at " + address_ + ":" + std::to_string(port_);
  wait_until_listening(address_, port_, elastic, who + " (is ddp-store running?)",
                       Clock::now() + patience);
  return handshake(
      [host = address_, opts] { return c10::make_intrusive<c10d::TCPStore>(host, opts); }, elastic,
      who, answer_within);
}

void Membership::watch(const ElasticWorld& now) {
  MutexLock lock(mutex_);
  watched_ = now.members;
  watched_generation_ = now.generation;
  change_wanted_.store(false, std::memory_order_release);
}

void Membership::observe(const StorePtr& store, int id) {
  const int64_t beats = store->add(heartbeat_key(id), 0);
  MutexLock lock(mutex_);
  Liveness& l = liveness_[id];
  if (beats != l.beats) {
    l.beats = beats;
    l.moved = Clock::now();
  }
}

void Membership::heartbeat() {
  StorePtr store;
  MutexLock lock(mutex_);
  while (!stopping_) {
    const std::vector<int> members = watched_;
    const int64_t generation = watched_generation_;
    lock.unlock();
    bool wanted = false;
    try {
      // A connection of its own (a client is one socket), made again after
      // a failure, each attempt short so that the destructor never waits long.
      if (!store) store = connect(10 * options_.heartbeat_interval());
      store->add(heartbeat_key(id_), 1);
      for (int m : members) {
        if (m != id_ && gone(store, m)) generation_abort_.member_gone(generation, m);
      }
      const bool room = options_.max_world_size() <= 0 ||
                        static_cast<int>(members.size()) < options_.max_world_size();
      wanted = generation >= 0 && room && store->check({generation_key(generation + 1, "count")});
    } catch (const std::exception&) {
      store.reset();  // the store is gone: formation will say so; try again next beat
    }
    lock.lock();
    // Only about the generation still watched: watch() may have moved on.
    if (wanted && generation == watched_generation_) {
      change_wanted_.store(true, std::memory_order_release);
    }
    wake_.wait_for(mutex_, options_.heartbeat_interval(),
                   [&]() DDP_REQUIRES(mutex_) { return stopping_; });
  }
}

bool Membership::gone(const StorePtr& store, int id) {
  observe(store, id);
  Clock::duration still;
  {
    MutexLock lock(mutex_);
    still = Clock::now() - liveness_[id].moved;
  }
  const auto info =
      store->check({member_key(id)})
          ? decode_process(store_text(store->get(member_key(id))))
          : ProcessInfo{};
  if (info.host == host_ && info.pid_namespace == pid_namespace_ && info.pid > 0) {
    switch (shm::process_state(info.pid)) {
      case shm::ProcessState::DEAD:
        return true;
      case shm::ProcessState::STOPPED:  // no heartbeat for two intervals: not a passing stop
        return still >= 2 * options_.heartbeat_interval();
      case shm::ProcessState::RUNNING:
        return false;
      case shm::ProcessState::UNKNOWN:
        break;
    }
  }
  return still >= options_.dead_after();
}

void Membership::finish() { store_->set(key("finished"), store_bytes("1")); }

int64_t Membership::first_undecided_generation(const StorePtr& store) const {
  // From the floor: the generations below it were collected (store_gc.h).
  int64_t n = 0;
  if (store->check({floor_key()})) n = std::stoll(store_text(store->get(floor_key())));
  while (store->check({generation_key(n, "decided")})) ++n;
  return n;
}

std::optional<GenerationRecord> Membership::decision(int64_t n) const {
  if (!store_->check({generation_key(n, "decided")})) return std::nullopt;
  auto record = GenerationRecord::decode(store_text(store_->get(generation_key(n, "decided"))));
  if (!record) {
    throw CommunicationError(member(id_),
                             "generation " + std::to_string(n) +
                                 "'s record on the store is unreadable: is another program using "
                                 "the store at " +
                                 address_ + ":" + std::to_string(port_) + "?");
  }
  return record;
}

std::vector<int> Membership::arrivals(int64_t n) {
  std::vector<int> arrived;
  const int64_t count = store_->add(generation_key(n, "count"), 0);
  for (int64_t k = 1; k <= count; ++k) {
    const std::string slot = generation_key(n, "slot/" + std::to_string(k));
    if (!store_->check({slot})) continue;  // registering now
    const int id = std::stoi(store_text(store_->get(slot)));
    if (!contains(arrived, id) && (id == id_ || !gone(store_, id))) arrived.push_back(id);
  }
  return arrived;
}

ElasticWorld Membership::form(const ElasticWorld& previous) {
  try {
    return form_after(previous);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // libtorch's store: the connection broke
    throw CommunicationError(member(id_),
                             "the store at " + address_ + ":" + std::to_string(port_) +
                                 " failed while the members formed a generation: " + e.what() +
                                 ". The store (ddp-store) must outlive every member.");
  }
}

ElasticWorld Membership::form_after(const ElasticWorld& previous) {
  int64_t n =
      previous.generation >= 0 ? previous.generation + 1 : first_undecided_generation(store_);
  const auto deadline = Clock::now() + options_.reform_timeout();
  const int initial = options_.initial_world_size() > 0
                          ? options_.initial_world_size()
                          : static_cast<int>(env_int("WORLD_SIZE", 1, 1 << 20).value_or(1));
  for (;; ++n) {
    std::optional<GenerationRecord> last;
    if (n > 0 && !(last = decision(n - 1))) {
      // Collected (store_gc.h): this process's last generation is long gone
      // (it was stopped, say): it starts over from the first undecided one.
      n = first_undecided_generation(store_) - 1;
      continue;
    }
    const auto arrived_at = Clock::now();
    // Collected while this process was away (stopped; store_gc.h): written
    // again, so that the others judge it by its process, not its heartbeat
    // alone (dead_after, 3 s, once it dies).
    if (!store_->check({member_key(id_)})) store_->set(member_key(id_), store_bytes(me_));
    const int64_t slot = store_->add(generation_key(n, "count"), 1);
    store_->set(generation_key(n, "slot/" + std::to_string(slot)),
                store_bytes(std::to_string(id_)));
    const std::vector<int> before = n > 0 ? last->members : std::vector<int>{};
    // Collected while this process waited (it was stopped, say): the others
    // are past it; a decision read or made now is nobody else's.
    auto collected = [&] {
      if (!store_->check({floor_key()})) return false;
      return n < std::stoll(store_text(store_->get(floor_key())));
    };
    bool restart = false;
    for (;;) {
      if (store_->check({key("finished")})) return ElasticWorld{};
      if (const auto record = decision(n)) {
        const auto at = std::find(record->members.begin(), record->members.end(), id_);
        if (at == record->members.end()) break;  // left out (late, or past the maximum): the next
        if (collected()) {
          restart = true;
          break;
        }
        ElasticWorld world;
        world.generation = n;
        world.rank = static_cast<int>(at - record->members.begin());
        world.world_size = static_cast<int>(record->members.size());
        world.members = record->members;
        world.left = record->left;
        world.joined = record->joined;
        world.formed_s = static_cast<double>(record->formed_ms) / 1000.0;
        return world;
      }
      if (collected()) {
        restart = true;
        break;
      }
      std::vector<int> arrived = arrivals(n), awaited;
      for (int m : before) {
        if (!contains(arrived, m) && !gone(store_, m)) awaited.push_back(m);
      }
      const int needed = n == 0 ? initial : options_.min_world_size();
      // The first generation is the launcher's ranks' to propose: a process
      // without $RANK (a joiner) that comes early waits for it.
      const bool may_propose = n > 0 || id_ < kFirstFreshId;
      if (may_propose && awaited.empty() && static_cast<int>(arrived.size()) >= needed) {
        if (n == 0)
          std::sort(arrived.begin(), arrived.end());  // ranks as the launcher numbered them
        GenerationRecord proposal = propose(before, arrived);
        proposal.formed_ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - arrived_at)
                .count();
        store_->compareSet(generation_key(n, "decided"), {}, store_bytes(proposal.encode()));
        continue;  // read back whichever proposal won
      }
      // A process that was no member, while the members live, is a spare:
      // it waits for a place (or the end) however long that takes.
      const bool spare = !contains(before, id_) && !awaited.empty();
      if (!spare && Clock::now() > deadline) {
        std::vector<int> lost;
        for (int m : before) {
          if (!contains(arrived, m) && !contains(awaited, m)) lost.push_back(m);
        }
        std::vector<int> missing = awaited;
        missing.insert(missing.end(), lost.begin(), lost.end());
        std::sort(missing.begin(), missing.end());
        throw TimeoutError(
            member(id_, missing),
            "generation " + std::to_string(n) + " was not formed within " +
                std::to_string(options_.reform_timeout().count()) +
                " ms: " + std::to_string(arrived.size()) + " member(s) here (" + list(arrived) +
                "), " + std::to_string(needed) + " needed" +
                (awaited.empty() ? "" : ", still waiting for " + list(awaited)) +
                (n > 0 ? "; gone since generation " + std::to_string(n - 1) + ": " + list(lost)
                       : "") +
                ". The job ends here; an on-disk checkpoint, if any, is untouched: restart "
                "from it, or lower min_world_size.");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (restart) n = first_undecided_generation(store_) - 1;
  }
}

// The next generation: the previous one's members that arrived, in their
// order, then newcomers in arrival order while there is room.
GenerationRecord Membership::propose(const std::vector<int>& before,
                                     const std::vector<int>& arrived) const {
  GenerationRecord proposal;
  for (int m : before) (contains(arrived, m) ? proposal.members : proposal.left).push_back(m);
  for (int id : arrived) {
    const bool room = options_.max_world_size() <= 0 ||
                      static_cast<int>(proposal.members.size()) < options_.max_world_size();
    if (!contains(before, id) && room) {
      proposal.members.push_back(id);
      if (!before.empty()) proposal.joined.push_back(id);
    }
  }
  return proposal;
}

}  // namespace ddp::detail::elastic
