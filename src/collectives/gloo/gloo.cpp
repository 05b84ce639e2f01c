// The Gloo backend's engine, in the module libddp_gloo.so (engine.h): libddp's
// GlooProcessGroup (group.cpp) forwards its collectives here.
//
// Each collective becomes a task of the ordered task queue
// (collectives/task_queue.h), tagged with its issue number: Gloo matches
// messages across ranks by tag, so tasks may run on several worker threads at
// once while their Works still complete in issue order.
//
// Failures: Gloo reports a broken connection with the peer's address; the
// ranks publish their connection addresses at set-up, so an error can name
// the peer's rank. The first failure breaks the group, is written to the
// store (so other ranks can cite it), and closes every connection, so peers
// waiting on this rank fail at once instead of at their timeout.
#include <ddp/errors.h>

#include "base/arrival.h"
#include "base/bounded.h"
#include "collectives/error_text.h"
#include "collectives/gloo/collectives.h"
#include "collectives/gloo/engine.h"
#include "collectives/gloo/failure_reports.h"
#include "collectives/gloo/network.h"
#include "collectives/gloo/store_adapter.h"
#include "collectives/no_sigpipe.h"
#include "collectives/task_queue.h"
#include "collectives/work_detail.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

namespace ddp {

namespace gloo_ops = detail::gloo_ops;

namespace {

constexpr std::chrono::seconds kFailureHandlingGrace(10);

// 16 bits of a hash of a collective's kind and byte count. They go into the
// upper half of its Gloo tag, its issue number into the lower: ranks whose
// collectives differ in size then use different slots, and Gloo, rather than
// enforcing sizes inside its own I/O thread (which aborts the process: a
// larger message than the receiver posted), leaves both waiting until the
// timeout, a TimeoutError. A different op or dtype of the same byte size
// still meets (DDP's per-iteration tally names it; DDP_DEBUG=detail too).
// At most 2^16 collectives are in flight at once.
uint32_t shape_bits(const char* kind, const at::Tensor& t, int64_t bytes = -1) {
  if (bytes < 0) bytes = t.defined() ? static_cast<int64_t>(t.nbytes()) : 0;
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](uint64_t v) {
    h = (h ^ v) * 0x100000001b3ULL;
    h ^= h >> 29;
  };
  for (const char* c = kind; *c; ++c) mix(static_cast<unsigned char>(*c));
  mix(static_cast<uint64_t>(bytes));
  return static_cast<uint32_t>((h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48)) & 0xffff);
}

// Whether `text` mentions `address` ("[ip]:port") as a whole: ":6339" must
// not match inside ":63390".
bool cites(const std::string& text, const std::string& address) {
  for (auto at = text.find(address); at != std::string::npos; at = text.find(address, at + 1)) {
    auto end = at + address.size();
    if (end == text.size() || !std::isdigit(static_cast<unsigned char>(text[end]))) return true;
  }
  return false;
}

// The group an engine serves, as its errors name it.
struct Owner {
  int rank;
  int size;
  ErrorContext context;  // rank 1 of 2 [gloo]
};

class Engine final : public detail::GlooEngine {
 public:
  explicit Engine(const detail::GlooEngineSetup& setup)
      : owner_{setup.rank, setup.size, setup.context},
        store_(setup.store),
        options_(setup.options) {
    const int rank = owner_.rank, size = owner_.size;
    auto device = make_device();
    // The store calls of this rendezvous are bounded as a whole: a stopped
    // rank 0 would block them in recv() forever. The body owns its captures.
    const auto timeout = options_.timeout();
    const ErrorContext errors = owner_.context;
    auto connect = [store = store_, device, rank, size, timeout, errors]() mutable {
      detail::wait_for_all_ranks(store, rank, size, timeout, "gloo");
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
      context->setTimeout(timeout);
      detail::GlooStore gloo_store(store);
      try {
        context->connectFullMesh(gloo_store, device);
      } catch (const std::exception& e) {
        throw CommunicationError(errors,
                                 "connecting to the other ranks failed: " + detail::cited(e) +
                                     ". Check that every rank can reach the others' "
                                     "addresses (DDP_SOCKET_IFNAME picks the interface).");
      }
      return Connected{context, learn_peer_addresses(*context, store, rank, size)};
    };
    const auto limit = timeout + std::max(std::chrono::milliseconds(2000), timeout / 10);
    auto connected = detail::run_bounded<Connected>(connect, limit, [&] {
      // About rank 0, whose store does not answer.
      throw TimeoutError(errors.about({0}), "connecting the Gloo group did not finish within " +
                                                std::to_string(limit.count()) +
                                                " ms: the store hosted by rank 0 does "
                                                "not answer (rank 0 stopped, frozen or cut off?)");
    });
    context_ = connected.context;
    peer_by_address_ = std::move(connected.peer_by_address);
    reports_ = std::make_unique<detail::FailureReports>(store_, rank, size);
    // A Work's default wait outlasts Gloo's own timeout by the time failure
    // handling may take (bounded store calls, FailureReports), so that the
    // error which names the unresponsive ranks is the one the caller sees.
    queue_ = std::make_unique<detail::TaskQueue>(
        owner_.context, timeout + kFailureHandlingGrace, options_.threads());
  }

  ~Engine() override {
    queue_->stop();  // the tasks use context_ and store_
    if (queue_->broken_reason().empty()) reports_->closed_cleanly();
  }

  WorkPtr allreduce(at::Tensor tensor, ReduceOp op) override {
    return enqueue(
        "allreduce", shape_bits("allreduce", tensor), detail::tensor_detail(tensor, to_string(op)),
        {tensor},
        [tensor, op](const gloo_ops::Call& call) { gloo_ops::allreduce(call, tensor, op); });
  }

  WorkPtr allreduce_coalesced(std::vector<at::Tensor> tensors, ReduceOp op) override {
    const std::string what = detail::coalesced_detail(tensors, op);
    int64_t bytes = 0;
    for (const auto& t : tensors) bytes += static_cast<int64_t>(t.nbytes());
    return enqueue("allreduce_coalesced", shape_bits("allreduce_coalesced", tensors[0], bytes),
                   what, tensors, [tensors, op](const gloo_ops::Call& call) {
                     gloo_ops::allreduce_coalesced(call, tensors, op);
                   });
  }

  WorkPtr broadcast(at::Tensor tensor, int root) override {
    return enqueue(
        "broadcast", shape_bits("broadcast", tensor),
        detail::tensor_detail(tensor) + ", root " + std::to_string(root), {tensor},
        [tensor, root](const gloo_ops::Call& call) { gloo_ops::broadcast(call, tensor, root); });
  }

  WorkPtr allgather(std::vector<at::Tensor> outputs, at::Tensor input) override {
    return enqueue("allgather", shape_bits("allgather", input), detail::tensor_detail(input),
                   outputs, [outputs, input](const gloo_ops::Call& call) {
                     gloo_ops::allgather(call, outputs, input);
                   });
  }

  WorkPtr reduce_scatter(at::Tensor output, std::vector<at::Tensor> inputs, ReduceOp op) override {
    return enqueue("reduce_scatter", shape_bits("reduce_scatter", output),
                   detail::tensor_detail(output, to_string(op)), {output},
                   [output, inputs, op](const gloo_ops::Call& call) {
                     gloo_ops::reduce_scatter(call, output, inputs, op);
                   });
  }

  WorkPtr barrier() override {
    return enqueue("barrier", shape_bits("barrier", at::Tensor()), "", {},
                   [](const gloo_ops::Call& call) { gloo_ops::barrier(call); });
  }

 private:
  // Queues `body` and returns its Work; `shape` from shape_bits.
  WorkPtr enqueue(const char* kind, uint32_t shape, const std::string& what,
                  std::vector<at::Tensor> outputs,
                  std::function<void(const gloo_ops::Call&)> body) {
    return queue_->enqueue(kind, what, std::move(outputs),
                           [this, shape, body = std::move(body)](uint32_t tag, const Work& work) {
                             return run((shape << 16) | (tag & 0xffff), work, body);
                           });
  }

  std::shared_ptr<gloo::transport::Device> make_device() {
    gloo::transport::tcp::attr attr;
    std::string iface =
        options_.interface().empty() ? detail::socket_interface_from_env() : options_.interface();
    if (!iface.empty()) {
      attr.iface = iface;
    } else {
      attr.hostname =
          options_.hostname().empty() ? detail::bindable_hostname() : options_.hostname();
    }
    try {
      detail::SigpipeBlockedForNewThreads loop_thread_writes_to_sockets;
      return gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw InvalidArgument(owner_.context,
                            "cannot use " +
                                (iface.empty() ? "host '" + attr.hostname + "'"
                                               : "network interface '" + iface + "'") +
                                " for Gloo: " + detail::cited(e) +
                                ". Set DDP_SOCKET_IFNAME to an interface that exists here.");
    }
  }

  struct Connected {
    std::shared_ptr<gloo::Context> context;
    std::map<std::string, int> peer_by_address;
  };

  // Publishes this rank's per-peer connection addresses and learns the
  // others', so that an error mentioning an address can name the rank.
  // Gloo's errors cite either end of the connection: map both.
  static std::map<std::string, int> learn_peer_addresses(gloo::Context& context,
                                                         const StorePtr& store, int rank,
                                                         int size) {
    std::map<std::string, int> peer_by_address;
    std::string mine;
    const auto connections = detail::established_tcp_connections();
    for (int r = 0; r < size; ++r) {
      if (r != rank) {
        std::string address = context.getPair(r)->address().str();
        peer_by_address[address] = r;
        mine += address;
        // A connection rank r opened to this pair's listener: its far end
        // is r's (ephemeral) address, which errors cite too.
        for (const auto& [local, remote] : connections) {
          if (local == address) peer_by_address[remote] = r;
        }
      }
      mine += '\n';
    }
    store->set("ddp/gloo/addresses/" + std::to_string(rank),
               std::vector<uint8_t>(mine.begin(), mine.end()));
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      auto bytes = store->get("ddp/gloo/addresses/" + std::to_string(r));
      std::istringstream lines(std::string(bytes.begin(), bytes.end()));
      std::string line;
      for (int i = 0; std::getline(lines, line); ++i) {
        if (i == rank) peer_by_address[line] = r;
      }
    }
    return peer_by_address;
  }

  std::exception_ptr run(uint32_t tag, const Work& work,
                         const std::function<void(const gloo_ops::Call&)>& body) {
    try {
      body(gloo_ops::Call{context_, tag, options_.timeout(), options_.algorithm()});
      return nullptr;
    } catch (const gloo::Exception& e) {
      return fail(work, e.what());
    } catch (const CommunicationError&) {
      return std::current_exception();
    } catch (const std::exception& e) {
      return std::make_exception_ptr(detail::failure_in(work.context(), e));
    }
  }

  // Names the peer, tells the other ranks, and closes the connections (the
  // queue breaks on the CommunicationError returned). Says what is known and
  // no more: what the store holds about the peer, or that the store (rank 0)
  // does not answer either. Every store call is bounded (FailureReports).
  std::exception_ptr fail(const Work& work, const std::string& gloo_error) {
    const bool timed_out = gloo_error.find("Timed out") != std::string::npos;
    const auto [peer, address] = cited_peer(gloo_error);
    std::string cause = gloo_error;
    if (peer >= 0) {
      cause = "lost the connection to rank " + std::to_string(peer) + " (" + address +
              "): " + gloo_error;
    }
    const std::string report = "rank " + std::to_string(owner_.rank) + ": " + cause;
    const auto deadline = std::chrono::steady_clock::now() + detail::kFailureBudget;
    auto first = reports_->report(report, deadline);
    std::string message = cause;
    // About the peer whose connection failed, and the ranks not responding.
    ErrorContext context = work.context();
    if (peer >= 0) context.peers.push_back(peer);
    bool peer_silent = false, peer_closed = false;
    if (peer >= 0) {
      // A peer reports its failure before it closes its connections (and
      // marks a clean close before its group goes), so a closed connection
      // needs one look at the store: no report then, none to come (it
      // crashed or was killed). A timeout gives a stuck peer a moment.
      const auto patience =
          timed_out ? std::chrono::milliseconds(500) : std::chrono::milliseconds(0);
      auto known = reports_->about(peer, patience, deadline);
      peer_silent = known && known->empty();
      peer_closed = known && known->find("had closed") != std::string::npos;
      if (known && !known->empty()) message += ". Before that, " + *known;
      if (peer_silent) {
        message += ". Rank " + std::to_string(peer) +
                   " reported nothing: it may have crashed, "
                   "been killed or lost its network; see its output";
      }
    }
    // Whoever has not reported a failure is not responding (a timeout), or
    // is the one that failed without a word.
    auto silent = peer_silent || peer_closed ? std::nullopt : reports_->silent(deadline);
    if (silent && !silent->empty()) {
      std::string ranks;
      for (int r : *silent) {
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
        if (r != peer) context.peers.push_back(r);
      }
      message += timed_out
                     ? ". Rank(s) " + ranks +
                           " did not report this failure: they are the "
                           "ones not responding (stopped, stuck, or issuing another collective)"
                     : ". Rank(s) " + ranks + " have not reported a failure; see their output";
    }
    if (first && !first->empty() && *first != report) {
      message += " (first failure reported: " + *first + ")";
    }
    if (!reports_->store_answers()) {
      message += ". The store hosted by rank 0 does not answer either (within " +
                 std::to_string(detail::kFailureBudget.count()) +
                 " ms): rank 0 is stopped, frozen or cut off from this rank, or has exited";
    }
    context_->closeConnections();
    if (timed_out) {
      return std::make_exception_ptr(TimeoutError(
          std::move(context),
          message + ". DDP_DEBUG=detail compares collectives across ranks; DDP_TIMEOUT "
                    "(seconds) sets how long a collective waits."));
    }
    return std::make_exception_ptr(CommunicationError(std::move(context), message));
  }

  // The rank whose connection address `gloo_error` cites, and the address;
  // -1 if none.
  std::pair<int, std::string> cited_peer(const std::string& gloo_error) const {
    for (const auto& [address, rank] : peer_by_address_) {
      if (cites(gloo_error, address)) return {rank, address};
    }
    return {-1, ""};
  }

  const Owner owner_;
  const StorePtr store_;
  const GlooOptions options_;
  std::shared_ptr<gloo::Context> context_;
  std::map<std::string, int> peer_by_address_;  // written before the queue starts
  std::unique_ptr<detail::FailureReports> reports_;
  std::unique_ptr<detail::TaskQueue> queue_;  // last: stopped first
};

}  // namespace
}  // namespace ddp

extern "C" ddp::detail::GlooEngine* ddp_gloo_create_engine(
    const ddp::detail::GlooEngineSetup& setup) {
  return new ddp::Engine(setup);  // in an anonymous namespace: this TU only
}
