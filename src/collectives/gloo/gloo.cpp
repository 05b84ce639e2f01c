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

#include "collectives/gloo/collectives.h"
#include "collectives/gloo/engine.h"
#include "collectives/gloo/network.h"
#include "collectives/gloo/store.h"
#include "collectives/task_queue.h"
#include "rendezvous/arrival.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cctype>
#include <map>
#include <sstream>
#include <thread>

namespace ddp {

namespace gloo_ops = detail::gloo_ops;

namespace {

std::string tensor_detail(const at::Tensor& t, const char* op = nullptr) {
  std::string s = op ? std::string(op) + ", " : "";
  return s + c10::toString(t.scalar_type()) + ", " + std::to_string(t.numel()) + " elements";
}

const char* kFailureKey = "ddp/gloo/first_failure";

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
  std::string where;  // "rank 1 of 2 [gloo]"
};

class Engine final : public detail::GlooEngine {
 public:
  explicit Engine(const detail::GlooEngineSetup& setup)
      : owner_{setup.rank, setup.size, setup.where}, store_(setup.store), options_(setup.options) {
    const int rank = owner_.rank, size = owner_.size;
    detail::wait_for_all_ranks(store_, rank, size, options_.timeout(), "gloo");
    auto device = make_device();
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(options_.timeout());
    detail::GlooStore gloo_store(store_);
    try {
      context->connectFullMesh(gloo_store, device);
    } catch (const std::exception& e) {
      throw CommunicationError("ddp: " + owner_.where +
                               ": connecting to the other ranks failed: " + e.what() +
                               ". Check that every rank can reach the others' "
                               "addresses (DDP_SOCKET_IFNAME picks the interface).");
    }
    context_ = context;
    learn_peer_addresses();
    queue_ = std::make_unique<detail::TaskQueue>(owner_.where, options_.timeout(),
                                                 options_.threads());
  }

  ~Engine() override { queue_->stop(); }  // the tasks use context_ and store_

  WorkPtr allreduce(at::Tensor tensor, ReduceOp op) override {
    return enqueue("allreduce", tensor_detail(tensor, to_string(op)), {tensor},
                   [tensor, op](const gloo_ops::Call& call) {
                     gloo_ops::allreduce(call, tensor, op);
                   });
  }

  WorkPtr allreduce_coalesced(std::vector<at::Tensor> tensors, ReduceOp op) override {
    std::string detail = std::string(to_string(op)) + ", " + std::to_string(tensors.size()) +
                         " tensors of " + c10::toString(tensors[0].scalar_type());
    return enqueue("allreduce_coalesced", detail, tensors,
                   [tensors, op](const gloo_ops::Call& call) {
                     gloo_ops::allreduce_coalesced(call, tensors, op);
                   });
  }

  WorkPtr broadcast(at::Tensor tensor, int root) override {
    return enqueue("broadcast", tensor_detail(tensor) + ", root " + std::to_string(root),
                   {tensor}, [tensor, root](const gloo_ops::Call& call) {
                     gloo_ops::broadcast(call, tensor, root);
                   });
  }

  WorkPtr allgather(std::vector<at::Tensor> outputs, at::Tensor input) override {
    return enqueue("allgather", tensor_detail(input), outputs,
                   [outputs, input](const gloo_ops::Call& call) {
                     gloo_ops::allgather(call, outputs, input);
                   });
  }

  WorkPtr reduce_scatter(at::Tensor output, std::vector<at::Tensor> inputs,
                         ReduceOp op) override {
    return enqueue("reduce_scatter", tensor_detail(output, to_string(op)), {output},
                   [output, inputs, op](const gloo_ops::Call& call) {
                     gloo_ops::reduce_scatter(call, output, inputs, op);
                   });
  }

  WorkPtr barrier() override {
    return enqueue("barrier", "", {}, [](const gloo_ops::Call& call) { gloo_ops::barrier(call); });
  }

 private:
  // Queues `body` and returns its Work.
  WorkPtr enqueue(const char* kind, const std::string& detail,
                  std::vector<at::Tensor> outputs,
                  std::function<void(const gloo_ops::Call&)> body) {
    return queue_->enqueue(kind, detail, std::move(outputs),
                           [this, body = std::move(body)](uint32_t tag, const Work& work) {
                             return run(tag, work, body);
                           });
  }

  std::shared_ptr<gloo::transport::Device> make_device() {
    gloo::transport::tcp::attr attr;
    std::string iface = options_.interface().empty() ? detail::socket_interface_from_env()
                                                     : options_.interface();
    if (!iface.empty()) {
      attr.iface = iface;
    } else {
      attr.hostname = options_.hostname().empty() ? detail::bindable_hostname()
                                                  : options_.hostname();
    }
    try {
      return gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw InvalidArgument("ddp: " + owner_.where + ": cannot use " +
                            (iface.empty() ? "host '" + attr.hostname + "'"
                                           : "network interface '" + iface + "'") +
                            " for Gloo: " + e.what() +
                            ". Set DDP_SOCKET_IFNAME to an interface that exists here.");
    }
  }

  // Publishes this rank's per-peer connection addresses and learns the
  // others', so that an error mentioning an address can name the rank.
  // Gloo's errors cite either end of the connection: map both.
  void learn_peer_addresses() {
    const int rank = owner_.rank, size = owner_.size;
    std::string mine;
    const auto connections = detail::established_tcp_connections();
    for (int r = 0; r < size; ++r) {
      if (r != rank) {
        std::string address = context_->getPair(r)->address().str();
        peer_by_address_[address] = r;
        mine += address;
        // A connection rank r opened to this pair's listener: its far end
        // is r's (ephemeral) address, which errors cite too.
        for (const auto& [local, remote] : connections) {
          if (local == address) peer_by_address_[remote] = r;
        }
      }
      mine += '\n';
    }
    store_->set("ddp/gloo/addresses/" + std::to_string(rank),
                std::vector<uint8_t>(mine.begin(), mine.end()));
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      auto bytes = store_->get("ddp/gloo/addresses/" + std::to_string(r));
      std::istringstream lines(std::string(bytes.begin(), bytes.end()));
      std::string line;
      for (int i = 0; std::getline(lines, line); ++i) {
        if (i == rank) peer_by_address_[line] = r;
      }
    }
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
      return std::make_exception_ptr(
          Error("ddp: " + work.description() + " failed: " + e.what()));
    }
  }

  // Names the peer, tells the other ranks, and closes the connections (the
  // queue breaks on the CommunicationError returned).
  std::exception_ptr fail(const Work& work, const std::string& gloo_error) {
    std::string cause = explain(gloo_error);
    std::string report = "rank " + std::to_string(owner_.rank) + ": " + cause;
    std::string first = report_failure(report);
    std::string message = "ddp: " + work.description() + " failed: " + cause;
    if (cause == gloo_error) {  // the error did not name the peer: who went silent?
      std::string silent = silent_ranks(std::chrono::seconds(2));
      if (!silent.empty()) {
        message += ". No failure report from rank(s) " + silent +
                   ": probably exited or killed; see their output";
      }
    }
    if (!first.empty() && first != report) message += " (first failure reported: " + first + ")";
    context_->closeConnections();
    if (gloo_error.find("Timed out") != std::string::npos) {
      return std::make_exception_ptr(TimeoutError(
          message + ". A rank may be stuck, dead, or issuing a different collective; "
                    "DDP_DEBUG=detail compares collectives across ranks."));
    }
    return std::make_exception_ptr(CommunicationError(message));
  }

  std::string explain(const std::string& gloo_error) const {
    for (const auto& [address, rank] : peer_by_address_) {
      if (cites(gloo_error, address)) {
        return "lost the connection to rank " + std::to_string(rank) + " (" + address +
               "): " + gloo_error + ". Rank " + std::to_string(rank) +
               " has probably exited or been killed; see its output";
      }
    }
    return gloo_error;
  }

  // Records that this rank failed, and `report` as the job's first failure if
  // none is yet; returns the first one recorded (empty if the store cannot be
  // reached).
  std::string report_failure(const std::string& report) {
    try {
      store_->set(failed_key(owner_.rank), std::vector<uint8_t>(report.begin(), report.end()));
      if (store_->add(std::string(kFailureKey) + "/count", 1) == 1) {
        store_->set(kFailureKey, std::vector<uint8_t>(report.begin(), report.end()));
        return report;
      }
      // Another rank counted first and is writing its report: wait briefly.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (!store_->check({kFailureKey})) {
        if (std::chrono::steady_clock::now() >= deadline) return "";
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      auto bytes = store_->get(kFailureKey);
      return std::string(bytes.begin(), bytes.end());
    } catch (const std::exception&) {
      return "";  // the store's host (rank 0) may be the rank that died
    }
  }

  // Ranks that have not reported a failure within `patience` (returns once
  // at most one is left): when a broken connection does not name its peer,
  // the dead rank is among them. Empty if the store cannot be reached.
  std::string silent_ranks(std::chrono::milliseconds patience) {
    const auto deadline = std::chrono::steady_clock::now() + patience;
    try {
      for (;;) {
        std::string silent;
        int count = 0;
        for (int r = 0; r < owner_.size; ++r) {
          if (r == owner_.rank || store_->check({failed_key(r)})) continue;
          silent += (count++ ? ", " : "") + std::to_string(r);
        }
        if (count <= 1 || std::chrono::steady_clock::now() >= deadline) return silent;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    } catch (const std::exception&) {
      return "";
    }
  }

  static std::string failed_key(int rank) { return "ddp/gloo/failed/" + std::to_string(rank); }

  const Owner owner_;
  const StorePtr store_;
  const GlooOptions options_;
  std::shared_ptr<gloo::Context> context_;
  std::map<std::string, int> peer_by_address_;  // written before the queue starts
  std::unique_ptr<detail::TaskQueue> queue_;     // last: stopped first
};

}  // namespace
}  // namespace ddp

extern "C" ddp::detail::GlooEngine* ddp_gloo_create_engine(
    const ddp::detail::GlooEngineSetup& setup) {
  return new ddp::Engine(setup);  // in an anonymous namespace: this TU only
}
