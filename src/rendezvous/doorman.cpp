#include "rendezvous/doorman.h"

#include "base/store_values.h"
#include "rendezvous/admission_protocol.h"

#include "base/mutex.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

namespace ddp::detail {

struct Doorman::Control {
  Mutex mu;
  CondVar changed;
  bool stopping DDP_GUARDED_BY(mu) = false;
  bool finished DDP_GUARDED_BY(mu) = false;
};

namespace {

using Clock = std::chrono::steady_clock;

// A request that took a ticket but has not written its hello is forgotten
// after this long (a client that died, or one that only counts tickets).
constexpr std::chrono::seconds kHelloPatience{10};
// At most this many requests are awaited at once (at least 64, else twice
// the world size): a stranger that adds a huge number to the ticket count
// costs a bounded number of checks per poll, never memory without end.
int max_waiting(int world_size) { return std::max(64, 2 * world_size); }
// How often the tickets are polled while ranks are still missing, and after.
constexpr std::chrono::milliseconds kPollWhileJoining{5};
constexpr std::chrono::milliseconds kPollAfterJoining{100};
// An elastic job's store polls at this pace for as long as it runs.
constexpr std::chrono::milliseconds kPollElastic{20};

struct Hello {
  int rank = -1;
  int world_size = -1;
  std::string nonce, proof, origin;
};

bool parse_hello(const std::string& text, Hello& hello) {
  std::istringstream in(text);
  return static_cast<bool>(in >> hello.rank >> hello.world_size >> hello.nonce >> hello.proof >>
                           hello.origin);
}

class Answerer {
 public:
  Answerer(StorePtr store, JobSecret secret, std::string challenge, int world_size)
      : store_(std::move(store)),
        secret_(std::move(secret)),
        challenge_(std::move(challenge)),
        world_size_(world_size),
        admitted_(world_size) {}

  // An elastic job's (ddp-store's): members come and go for its whole life.
  bool elastic() const { return world_size_ == admission::kElasticWorldSize; }
  // On stderr, unless it was the last thing said.
  void say_once(const std::string& what) {
    if (what == last_said_) return;
    last_said_ = what;
    std::fprintf(stderr, "ddp-store: admission: %s\n", what.c_str());
  }
  // How long to wait before the next poll.
  std::chrono::milliseconds pause() const {
    if (elastic()) return kPollElastic;
    return admitted_count_ < world_size_ - 1 ? kPollWhileJoining : kPollAfterJoining;
  }

  // Takes the new tickets and answers those whose hello has come.
  void poll() {
    const int64_t tickets = store_->add(admission::kTicketsKey, 0);
    const int64_t window = max_waiting(world_size_);
    // Counts that went back (a stranger's negative add) are ignored; a jump
    // past the window is skipped over to its last tickets.
    next_ticket_ = std::max(next_ticket_, tickets - window + 1);
    for (; next_ticket_ <= tickets; ++next_ticket_) waiting_[next_ticket_] = Clock::now();
    while (static_cast<int64_t>(waiting_.size()) > window) waiting_.erase(waiting_.begin());
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      const std::string key = admission::hello_key(it->first);
      if (store_->check({key})) {
        answer(it->first, store_text(store_->get(key)));
        it = waiting_.erase(it);
      } else if (Clock::now() - it->second > kHelloPatience) {
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }

 private:
  void answer(int64_t ticket, const std::string& text) {
    Hello hello;
    if (!parse_hello(text, hello)) return refuse(ticket, hello, "its request is malformed");
    const std::string expected = secret_.mac(admission::admission_message(
        admission::kProofLabel, challenge_, ticket, hello.rank, hello.world_size, hello.nonce));
    if (!equal_in_constant_time(hello.proof, expected)) {
      return refuse(ticket, hello,
                    "its proof of the job secret does not match " +
                        std::string(elastic() ? "ddp-store's" : "rank 0's") +
                        " (DDP_JOB_SECRET differs between the processes, or the process belongs "
                        "to another job). " +
                        std::string(admission::kSameSecretAdvice));
    }
    if (elastic() || hello.world_size == admission::kElasticWorldSize) {
      if (hello.world_size != world_size_) {
        return refuse(ticket, hello,
                      elastic()
                          ? "it asks to join a job of " + std::to_string(hello.world_size) +
                                " ranks, but this store serves an elastic job (ddp-store): "
                                "start it as an elastic member (ddp::ElasticRunner)"
                          : "it asks as a member of an elastic job, but this store serves a job "
                            "of " + std::to_string(world_size_) +
                                " ranks: point it at the elastic job's ddp-store");
      }
      return admit(ticket, hello);  // member ids are the membership protocol's to check
    }
    if (hello.world_size != world_size_) {
      return refuse(ticket, hello,
                    "it was started with world size " + std::to_string(hello.world_size) +
                        " but rank 0 with " + std::to_string(world_size_) +
                        ". Start every rank with the same WORLD_SIZE.");
    }
    if (hello.rank < 1 || hello.rank >= world_size_) {
      return refuse(ticket, hello,
                    "its rank is outside [1, " + std::to_string(world_size_) +
                        "). Give every rank its own RANK below WORLD_SIZE.");
    }
    std::string& admitted = admitted_[hello.rank];
    if (!admitted.empty()) {
      return refuse(ticket, hello,
                    "rank " + std::to_string(hello.rank) + " is already in the job (" + admitted +
                        "). Give every rank its own RANK; a second copy of the job may be "
                        "running with the same MASTER_PORT and secret.");
    }
    admitted = hello.origin;
    ++admitted_count_;
    store_->deleteKey(admission::refused_key(hello.rank));
    admit(ticket, hello);
  }

  void admit(int64_t ticket, const Hello& hello) {
    store_->set(admission::verdict_key(ticket),
                store_bytes("admitted " +
                            secret_.mac(admission::admission_message(
                                admission::kAnswerLabel, challenge_, ticket, hello.rank,
                                hello.world_size, hello.nonce))));
  }

  void refuse(int64_t ticket, const Hello& hello, const std::string& why) {
    store_->set(admission::verdict_key(ticket), store_bytes("refused " + why));
    if (hello.rank >= 1 && hello.rank < world_size_ && admitted_[hello.rank].empty()) {
      store_->set(admission::refused_key(hello.rank),
                  store_bytes("a process claiming rank " + std::to_string(hello.rank) + " (" +
                              hello.origin + ") was refused: " + why));
    }
  }

  StorePtr store_;
  JobSecret secret_;
  std::string challenge_;
  int world_size_;
  std::vector<std::string> admitted_;  // by rank: where it was admitted from
  int admitted_count_ = 0;
  int64_t next_ticket_ = 1;
  std::map<int64_t, Clock::time_point> waiting_;  // ticket -> when it was seen
  std::string last_said_;
};

}  // namespace

Doorman::Doorman(StorePtr store, JobSecret secret, std::string challenge, int world_size)
    : control_(std::make_shared<Control>()) {
  auto answerer = std::make_shared<Answerer>(std::move(store), std::move(secret),
                                             std::move(challenge), world_size);
  std::thread([control = control_, answerer] {
    try {
      MutexLock lock(control->mu);
      while (!control->stopping) {
        lock.unlock();
        try {
          answerer->poll();
        } catch (const std::exception& e) {
          // An elastic job's store admits for its whole life: a failed poll
          // (a request it could not read) is said once and polling goes on.
          if (!answerer->elastic()) throw;
          answerer->say_once(e.what());
        }
        lock.lock();
        control->changed.wait_for(control->mu, answerer->pause(),
                                  [&]() DDP_REQUIRES(control->mu) { return control->stopping; });
      }
    } catch (const std::exception&) {
      // The store went away (the job is ending): nobody is left to admit.
    }
    MutexLock lock(control->mu);
    control->finished = true;
    control->changed.notify_all();
  }).detach();
}

Doorman::~Doorman() {
  MutexLock lock(control_->mu);
  control_->stopping = true;
  control_->changed.notify_all();
  control_->changed.wait_for(control_->mu, std::chrono::seconds(2),
                             [&]() DDP_REQUIRES(control_->mu) { return control_->finished; });
}

}  // namespace ddp::detail
