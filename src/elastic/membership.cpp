#include "elastic/membership.h"

#include "collectives/host_identity.h"
#include "collectives/shm/peers.h"
#include "compat/torch_compat.h"
#include "elastic/record.h"
#include "rendezvous/env.h"
#include "rendezvous/store_handshake.h"

#include <ddp/errors.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

namespace ddp::detail::elastic {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

std::string where(int id) { return "ddp: elastic member " + std::to_string(id) + ": "; }

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
  const auto rank = env_int("RANK", 0, (1L << 30) - 1);
  if (!addr || !port) {
    throw InvalidArgument(
        "ddp: elastic training needs the store that outlives its members: set MASTER_ADDR and "
        "MASTER_PORT to a running ddp-store (ddprun --elastic starts one; by hand: ddp-store "
        "--port P)");
  }
  address_ = *addr;
  port_ = static_cast<int>(*port);
  store_ = connect();
  // A process with no $RANK (or one that came later) takes an id no
  // launcher gives: 1'000'000 and up.
  id_ = rank ? static_cast<int>(*rank)
             : 1000000 + static_cast<int>(store_->add(key("next_id"), 1)) - 1;
  const std::string me = encode({host_, pid_namespace_, static_cast<int32_t>(getpid())});
  const std::string holder = text(store_->compareSet(key("member/" + std::to_string(id_)), {}, bytes(me)));
  if (holder != me) {
    const ProcessInfo other = decode_process(holder);
    const bool alive = other.host != host_ || other.pid_namespace != pid_namespace_ ||
                       shm::process_state(other.pid) != shm::ProcessState::DEAD;
    if (alive) {
      throw InvalidArgument(where(id_) + "member id " + std::to_string(id_) +
                            " is held by process " + std::to_string(other.pid) + " on " +
                            (other.host == host_ ? "this host" : "another host") +
                            ": give every process of an elastic job its own RANK, or none");
    }
    store_->set(key("member/" + std::to_string(id_)), bytes(me));  // the id of a dead process
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

StorePtr Membership::connect() const {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(port_);
  opts.isServer = false;
  opts.waitWorkers = false;
  opts.timeout = std::chrono::milliseconds(30000);
  compat::use_classic_tcp_store(opts);
  const std::string who = "ddp: elastic: the store at " + address_ + ":" + std::to_string(port_);
  const auto deadline = Clock::now() + options_.reform_timeout();
  wait_until_listening(address_, port_, who + " (is ddp-store running?)", deadline);
  return handshake([host = address_, opts] { return c10::make_intrusive<c10d::TCPStore>(host, opts); },
                   who);
}

void Membership::watch(const ElasticWorld& now) {
  MutexLock lock(mutex_);
  watched_ = now.members;
  watched_generation_ = now.generation;
  change_wanted_.store(false, std::memory_order_release);
}

void Membership::observe(const StorePtr& store, int id) {
  const int64_t beats = store->add(key("hb/" + std::to_string(id)), 0);
  MutexLock lock(mutex_);
  Liveness& l = liveness_[id];
  if (beats != l.beats) {
    l.beats = beats;
    l.moved = Clock::now();
  }
}

void Membership::heartbeat() {
  StorePtr store;
  try {
    store = connect();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%sno heartbeat: %s\n", where(id_).c_str(), e.what());
    return;
  }
  MutexLock lock(mutex_);
  while (!stopping_) {
    const std::vector<int> members = watched_;
    const int64_t generation = watched_generation_;
    lock.unlock();
    bool wanted = false;
    try {
      store->add(key("hb/" + std::to_string(id_)), 1);
      for (int m : members) {
        if (m != id_) observe(store, m);
      }
      const bool room = options_.max_world_size() <= 0 ||
                        static_cast<int>(members.size()) < options_.max_world_size();
      wanted = generation >= 0 && room && store->check({generation_key(generation + 1, "count")});
    } catch (const std::exception&) {
      // The store is gone: formation will say so; the heartbeat goes on trying.
    }
    lock.lock();
    // Only about the generation still watched: watch() may have moved on.
    if (wanted && generation == watched_generation_) {
      change_wanted_.store(true, std::memory_order_release);
    }
    wake_.wait_for(mutex_, options_.heartbeat_interval(), [&]() DDP_REQUIRES(mutex_) { return stopping_; });
  }
}

bool Membership::gone(const StorePtr& store, int id) {
  observe(store, id);
  Clock::duration still;
  {
    MutexLock lock(mutex_);
    still = Clock::now() - liveness_[id].moved;
  }
  const auto info = store->check({key("member/" + std::to_string(id))})
                        ? decode_process(text(store->get(key("member/" + std::to_string(id)))))
                        : ProcessInfo{};
  if (info.host == host_ && info.pid_namespace == pid_namespace_ && info.pid > 0) {
    switch (shm::process_state(info.pid)) {
      case shm::ProcessState::DEAD:
        return true;
      case shm::ProcessState::STOPPED:  // no heartbeat for two intervals: not a passing stop
        if (still >= 2 * options_.heartbeat_interval()) return true;
        break;
      default:
        break;
    }
  }
  return still >= options_.dead_after();
}

void Membership::finish() { store_->set(key("finished"), bytes("1")); }

int64_t Membership::first_undecided_generation(const StorePtr& store) const {
  int64_t n = 0;
  while (store->check({generation_key(n, "decided")})) ++n;
  return n;
}

ElasticWorld Membership::form(const ElasticWorld& previous) {
  const StorePtr& store = store_;
  int64_t n = previous.generation >= 0 ? previous.generation + 1 : first_undecided_generation(store);
  const auto deadline = Clock::now() + options_.reform_timeout();
  const int initial = options_.initial_world_size() > 0
                          ? options_.initial_world_size()
                          : static_cast<int>(env_int("WORLD_SIZE", 1, 1 << 20).value_or(1));
  for (;; ++n) {
    const auto arrived_at = Clock::now();
    const int64_t slot = store->add(generation_key(n, "count"), 1);
    store->set(generation_key(n, "slot/" + std::to_string(slot)), bytes(std::to_string(id_)));
    std::vector<int> before;  // generation n - 1's members
    if (n > 0) before = GenerationRecord::decode(text(store->get(generation_key(n - 1, "decided"))))->members;
    std::vector<int> arrived, awaited;
    int needed = 0;
    for (;;) {
      if (store->check({key("finished")})) return ElasticWorld{};
      if (store->check({generation_key(n, "decided")})) {
        const auto record = GenerationRecord::decode(text(store->get(generation_key(n, "decided"))));
        if (!record) throw CommunicationError(where(id_) + "generation " + std::to_string(n) + "'s record on the store is unreadable");
        const auto at = std::find(record->members.begin(), record->members.end(), id_);
        if (at == record->members.end()) break;  // left out (late, or past the maximum): the next one
        ElasticWorld world;
        world.generation = n;
        world.rank = static_cast<int>(at - record->members.begin());
        world.world_size = static_cast<int>(record->members.size());
        world.members = record->members;
        world.left = record->left;
        world.joined = record->joined;
        world.formed_s = record->formed_ms / 1000.0;
        return world;
      }
      // Who is here (in arrival order), and whom to wait for.
      const int64_t count = store->add(generation_key(n, "count"), 0);
      arrived.clear();
      for (int64_t k = 1; k <= count; ++k) {
        const std::string slot_key = generation_key(n, "slot/" + std::to_string(k));
        if (!store->check({slot_key})) continue;  // registering now
        const int id = std::stoi(text(store->get(slot_key)));
        if (!contains(arrived, id) && (id == id_ || !gone(store, id))) arrived.push_back(id);
      }
      awaited.clear();
      for (int m : before) {
        if (!contains(arrived, m) && !gone(store, m)) awaited.push_back(m);
      }
      needed = n == 0 ? initial : options_.min_world_size();
      if (awaited.empty() && static_cast<int>(arrived.size()) >= needed) {
        GenerationRecord proposal;
        for (int m : before) {
          if (contains(arrived, m)) proposal.members.push_back(m);
          else proposal.left.push_back(m);
        }
        if (n == 0) std::sort(arrived.begin(), arrived.end());  // ranks as the launcher numbered them
        for (int id : arrived) {
          const bool room = options_.max_world_size() <= 0 ||
                            static_cast<int>(proposal.members.size()) < options_.max_world_size();
          if (!contains(before, id) && room) {
            proposal.members.push_back(id);
            if (n > 0) proposal.joined.push_back(id);
          }
        }
        proposal.formed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - arrived_at).count();
        store->compareSet(generation_key(n, "decided"), {}, bytes(proposal.encode()));
        continue;  // read back whichever proposal won
      }
      if (Clock::now() > deadline) {
        std::vector<int> lost;
        for (int m : before) {
          if (!contains(arrived, m) && !contains(awaited, m)) lost.push_back(m);
        }
        throw TimeoutError(
            where(id_) + "generation " + std::to_string(n) + " was not formed within " +
            std::to_string(options_.reform_timeout().count()) + " ms: " + std::to_string(arrived.size()) +
            " member(s) here (" + list(arrived) + "), " + std::to_string(needed) + " needed" +
            (awaited.empty() ? "" : ", still waiting for " + list(awaited)) +
            (n > 0 ? "; gone since generation " + std::to_string(n - 1) + ": " + list(lost) : "") +
            ". The job ends here; an on-disk checkpoint, if any, is untouched: restart from it, "
            "or lower min_world_size.");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
}

}  // namespace ddp::detail::elastic
