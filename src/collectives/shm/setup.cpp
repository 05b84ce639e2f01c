#include "collectives/shm/setup.h"

#include "base/arrival.h"
#include "base/setup_cancel.h"
#include "collectives/error_text.h"
#include "collectives/flagged_ranks.h"
#include "collectives/host_identity.h"
#include "collectives/shm/peers.h"

#include <ddp/errors.h>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

namespace ddp::detail::shm {
namespace {

const char* kPeerKey = "ddp/shm/peer/";
const char* kSegmentKey = "ddp/shm/segment";
const char* kErrorMark = "error: ";
const char* kMapFailedKey = "ddp/shm/map_failed";
const char* kMapFailedCountKey = "ddp/shm/map_failed/count";
const char* kRefusedKey = "ddp/shm/refused_other_hosts";

std::vector<uint8_t> to_bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string to_string(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

struct Peer {
  std::string host, pid_namespace;
};

Peer parse_peer(const std::string& text) {
  std::istringstream in(text);
  Peer p;
  std::getline(in, p.host);
  std::getline(in, p.pid_namespace);
  return p;
}

// The rank a set-up failure report ("rank 2: ...", kMapFailedKey) names;
// none when it names none.
std::vector<int> reporter(const std::string& report) {
  int rank = -1;
  if (std::sscanf(report.c_str(), "rank %d:", &rank) == 1 && rank >= 0) return {rank};
  return {};
}

// InvalidArgument on every rank when the ranks are not all on one host,
// about the ranks on other hosts than this one.
void require_one_host(const std::vector<Peer>& peers, const ErrorContext& context) {
  std::map<std::string, std::string> ranks_by_host;
  for (size_t r = 0; r < peers.size(); ++r) {
    auto& ranks = ranks_by_host[peers[r].host];
    ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  }
  if (ranks_by_host.size() == 1) return;
  std::string hosts;
  for (const auto& [host, ranks] : ranks_by_host) {
    hosts += (hosts.empty() ? "" : "; ") + std::string("ranks ") + ranks + " on host " + host;
  }
  std::vector<int> elsewhere;
  for (size_t r = 0; r < peers.size(); ++r) {
    if (peers[r].host != peers[context.rank].host) elsewhere.push_back(static_cast<int>(r));
  }
  throw InvalidArgument(context.about(std::move(elsewhere)),
                        "the shm backend needs every rank on one host, but " +
                            std::to_string(ranks_by_host.size()) + " hosts take part: " + hosts +
                            ". Across hosts use the auto or hierarchical backend (shm within "
                            "each host), or gloo (DDP_BACKEND=gloo).");
}

// Rank 0's segment name, or its set-up error; polls the store until `deadline`.
std::string await_name(const StorePtr& store, std::chrono::steady_clock::time_point deadline,
                       std::chrono::milliseconds timeout, const ErrorContext& context) {
  auto pause = std::chrono::milliseconds(1);
  while (!store->check({kSegmentKey})) {
    throw_if_setup_cancelled();
    if (std::chrono::steady_clock::now() >= deadline) {
      throw TimeoutError(context.about({0}), "rank 0 did not publish the shm segment within " +
                                                 std::to_string(timeout.count()) +
                                                 " ms; see rank 0's output");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  std::string name = to_string(store->get(kSegmentKey));
  if (name.rfind(kErrorMark, 0) == 0) {
    throw CommunicationError(context.about({0}), "rank 0 could not create the shm segment: " +
                                                     name.substr(std::string(kErrorMark).size()));
  }
  return name;
}

// Until every rank has recorded its pid in the segment; a rank that could
// not map it says so in the store, and then every rank fails at once.
void await_attached(const StorePtr& store, Segment& seg, const std::string& name, int size,
                    std::chrono::steady_clock::time_point deadline,
                    std::chrono::milliseconds timeout, const ErrorContext& context) {
  for (int i = 0;
       seg.header().attached.load(std::memory_order_acquire) < static_cast<uint32_t>(size); ++i) {
    if (i % 20 == 19 && store->check({kMapFailedKey})) {
      Segment::unlink(name);
      const std::string report = to_string(store->get(kMapFailedKey));
      throw CommunicationError(context.about(reporter(report)),
                               "the shm set-up failed on " + report);
    }
    try {
      throw_if_setup_cancelled();
    } catch (...) {
      Segment::unlink(name);  // a peer is gone: leave nothing behind
      throw;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::vector<int> missing_ranks;
      for (int r = 0; r < size; ++r) {
        if (seg.control(r).pid.load() == 0) missing_ranks.push_back(r);
      }
      const std::string missing = rank_list(missing_ranks);
      Segment::unlink(name);  // nobody else may come: leave nothing behind
      throw TimeoutError(context.about(std::move(missing_ranks)),
                         "rank(s) " + missing + " did not map the shm segment within " +
                             std::to_string(timeout.count()) + " ms; see their output");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

Attached attach(const StorePtr& store, int rank, int size, const ShmOptions& o,
                const ErrorContext& context) {
  const auto deadline = std::chrono::steady_clock::now() + o.timeout();
  store->set(kPeerKey + std::to_string(rank),
             to_bytes(detail::host_identity() + "\n" + pid_namespace()));
  detail::wait_for_all_ranks(store, rank, size, o.timeout(), "shm");
  std::vector<Peer> peers;
  for (int r = 0; r < size; ++r)
    peers.push_back(parse_peer(to_string(store->get(kPeerKey + std::to_string(r)))));
  // Every rank has read every peer before any refuses, and rank 0, which
  // hosts the store and may exit at once after refusing, refuses last.
  detail::wait_for_all_ranks(store, rank, size, o.timeout(), "shm/peers_read");
  const bool one_host = std::all_of(peers.begin(), peers.end(),
                                    [&](const Peer& p) { return p.host == peers[0].host; });
  if (!one_host) {
    if (rank != 0) {
      store->add(kRefusedKey, 1);
    } else {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (store->add(kRefusedKey, 0) < size - 1 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
  }
  require_one_host(peers, context);

  Attached out;
  out.same_pid_namespace = std::all_of(peers.begin(), peers.end(), [&](const Peer& p) {
    return p.pid_namespace == peers[0].pid_namespace && !p.pid_namespace.empty();
  });
  std::string name;
  if (rank == 0) {
    name = fresh_segment_name();
    try {
      out.segment = Segment::create(name, size, o.slots(), o.chunk_bytes());
    } catch (const std::exception& e) {
      store->set(kSegmentKey, to_bytes(kErrorMark + cited(e)));
      throw;
    }
    store->set(kSegmentKey, to_bytes(name));
  } else {
    name = await_name(store, deadline, o.timeout(), context);
    try {
      out.segment = Segment::open(name, size, o.slots(), o.chunk_bytes());
    } catch (const std::exception& e) {
      // The first rank that fails speaks for all, and only then removes the
      // name (which makes later ranks' opens fail too: they cite the first).
      if (store->add(kMapFailedCountKey, 1) == 1) {
        store->set(kMapFailedKey, to_bytes("rank " + std::to_string(rank) + ": " + cited(e)));
        Segment::unlink(name);  // the group cannot form: leave nothing behind
        throw;
      }
      const std::string report = to_string(store->get(kMapFailedKey));
      throw CommunicationError(context.about(reporter(report)),
                               "the shm set-up failed on " + report);
    }
  }
  Segment& seg = out.segment;
  seg.control(rank).pid.store(static_cast<int32_t>(getpid()), std::memory_order_relaxed);
  seg.control(rank).progress_ms.store(monotonic_ms(), std::memory_order_relaxed);
  // The last rank to map it removes the name: from here on the memory lives
  // only as long as some rank maps it, whatever way the processes end.
  if (seg.header().attached.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<uint32_t>(size)) {
    Segment::unlink(name);
  }
  await_attached(store, seg, name, size, deadline, o.timeout(), context);
  return out;
}

}  // namespace ddp::detail::shm
