// `ddp_bench collectives`: allreduce(SUM, float32) through ddp's backends
// (every registered one: gloo, mpi, ...) against libtorch's own
// c10d::ProcessGroupGloo and, for MPI, MPI_Allreduce called directly
// ("mpi-raw", the floor for ddp's MPI backend), in one run, on one store.
//
// Method. For each size, every implementation is first checked once for a
// correct result (a failure ends the run). Then samples are interleaved in
// pairs, A B, B A, A B, ... so that neither implementation always goes first.
// Each sample is one blocking allreduce, preceded by a 1-element allreduce on
// the same group so that all ranks start it together; a sample's time is the
// slowest rank's (ranks publish their samples through the store, which is
// independent of both implementations). Reported: median, min and max of the
// samples, nccl-tests' bus bandwidth busbw = bytes/median * 2(n-1)/n, and
// each backend over its baseline (c10d; mpi-raw for mpi) both as a ratio of
// medians and as the median of per-pair ratios.
// Unless --iters fixes the count, the warm-up's duration decides how many
// pairs fit in --budget-s per size (between 5 and 500), and
// rank 0 tells the others.
//
// This file measures; the command line is collectives_config.cpp's and the
// table and JSON collectives_report.cpp's (both in collectives_bench.h).
#include "c10d_group.h"
#include "collectives_bench.h"
#include "mpi_raw.h"
#include "subcommands.h"

#include <ddp/backends/gloo.h>
#include <ddp/backends/mpi.h>
#include <ddp/backends/shm.h>
#include <ddp/init.h>

#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <sstream>
#include <thread>

namespace ddp_bench {
namespace {

// One implementation: a blocking allreduce(SUM) in place.
struct Impl {
  std::string name;
  std::function<void(at::Tensor&)> allreduce;
};

// Rank r contributes (r + 1) + (i % 7) at element i, so the sum is
// n(n+1)/2 + n(i % 7): exact in float32, and a misplaced chunk shows.
void check_allreduce(const Impl& impl, at::Tensor& t, int rank, int world) {
  float* p = t.data_ptr<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(rank + 1 + i % 7);
  impl.allreduce(t);
  const double base = world * (world + 1) / 2.0;
  for (int64_t i = 0; i < n; ++i) {
    const double expected = base + world * static_cast<double>(i % 7);
    if (p[i] != expected) {
      std::ostringstream msg;
      msg << "WRONG RESULT: rank " << rank << ": " << impl.name << " allreduce(SUM) of "
          << format_bytes(t.nbytes()) << " float32 (" << n << " elements) gave " << p[i]
          << " at element " << i << ", expected " << expected;
      throw std::runtime_error(msg.str());
    }
  }
}

std::string samples_to_text(const std::vector<double>& v) {
  std::ostringstream out;
  out.precision(17);
  for (double x : v) out << x << ' ';
  return out.str();
}

std::vector<double> text_to_samples(const std::vector<uint8_t>& bytes) {
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  std::vector<double> v;
  for (double x; in >> x;) v.push_back(x);
  return v;
}

std::vector<uint8_t> to_bytes(const std::string& s) { return {s.begin(), s.end()}; }

// Every rank publishes its samples under `key`; rank 0 returns, per sample,
// the slowest rank's time. Other ranks return their own.
std::vector<double> slowest_rank(c10d::Store& store, const std::string& key,
                                 const std::vector<double>& mine, int rank, int world) {
  store.set(key + "/" + std::to_string(rank), to_bytes(samples_to_text(mine)));
  if (rank != 0) return mine;
  std::vector<double> out = mine;
  for (int r = 1; r < world; ++r) {
    auto theirs = text_to_samples(store.get(key + "/" + std::to_string(r)));
    if (theirs.size() != out.size()) {
      throw std::runtime_error("rank " + std::to_string(r) + " published " +
                               std::to_string(theirs.size()) + " samples under " + key +
                               ", rank 0 has " + std::to_string(out.size()));
    }
    for (size_t i = 0; i < out.size(); ++i) out[i] = std::max(out[i], theirs[i]);
  }
  return out;
}

}  // namespace

int run_collectives(Args args) {
  const CollectivesConfig cfg = parse_collectives_config(args);
  torch::set_num_threads(static_cast<int>(cfg.threads));

  ddp::InitOptions init = ddp_bench::init_options(static_cast<int>(cfg.gloo_threads));
  ddp::StorePtr store = ddp::rendezvous(init);
  const int rank = init.rank(), world = init.world_size();

  // Both groups bind where ddp's rendezvous decided (the address routing to
  // the master, or $DDP_SOCKET_IFNAME / $GLOO_SOCKET_IFNAME).
  const std::string bind = c10d_bind_description(init);

  // Every rank builds the groups in the order of --impls (MPI's are
  // collective over MPI_COMM_WORLD).
  std::vector<Impl> impls;
  std::vector<ddp::ProcessGroupPtr> ddp_groups;  // kept alive until the end
  c10::intrusive_ptr<c10d::ProcessGroupGloo> c10d_pg;
  std::unique_ptr<RawMpiAllreduce> raw_mpi;
  for (const auto& name : cfg.impls) {
    if (name == "c10d") {
      c10d_pg = make_c10d_gloo(store, init, static_cast<int>(cfg.gloo_threads));
      impls.push_back({"c10d", [&c10d_pg](at::Tensor& t) {
                         std::vector<at::Tensor> v{t};
                         c10d_pg->allreduce(v)->wait();
                       }});
    } else if (name == "mpi-raw" || name == "mpi-raw-nb") {
      if (!raw_mpi) raw_mpi = std::make_unique<RawMpiAllreduce>();
      if (name == "mpi-raw") {
        impls.push_back({name, [&raw_mpi](at::Tensor& t) { raw_mpi->allreduce(t); }});
      } else {
        impls.push_back({name, [&raw_mpi](at::Tensor& t) { raw_mpi->allreduce_polled(t); }});
      }
    } else {
      ddp::InitOptions o = init;
      o.backend(name);
      o.backend_options(nullptr);  // the backend's defaults, but Gloo's worker threads:
      if (name == "gloo") {
        o.backend_options(std::make_shared<ddp::GlooOptions>(
            ddp::GlooOptions().threads(static_cast<int>(cfg.gloo_threads))));
      }
      // The same backend with every collective handed to its worker thread
      // (inline_bytes 0): what the caller-run path saves.
      if (name == "shm-handoff") {
        o.backend("shm").backend_options(
            std::make_shared<ddp::ShmOptions>(ddp::ShmOptions().inline_bytes(0)));
      } else if (name == "mpi-handoff") {
        o.backend("mpi").backend_options(
            std::make_shared<ddp::MpiOptions>(ddp::MpiOptions().inline_bytes(0)));
      }
      auto pg = ddp::new_process_group(store, rank, world, o);
      ddp_groups.push_back(pg);
      impls.push_back({name, [pg](at::Tensor& t) { pg->allreduce(t)->wait(); }});
    }
  }

  const std::string torch_version = TORCH_VERSION;
  if (rank == 0) {
    std::fprintf(
        stderr,
        "collectives: %d ranks, %lld intra-op thread(s), %lld gloo thread(s), bind %s; %s\n", world,
        static_cast<long long>(cfg.threads), static_cast<long long>(cfg.gloo_threads), bind.c_str(),
        machine_summary(torch_version).c_str());
  }

  at::Tensor sync = torch::zeros({1}, torch::kFloat);
  auto sample = [&](const Impl& impl, at::Tensor& t) {
    impl.allreduce(sync);  // start together
    auto t0 = Clock::now();
    impl.allreduce(t);
    return micros_between(t0, Clock::now());
  };

  std::vector<CollectivesRow> rows;
  const size_t k = impls.size();
  for (size_t si = 0; si < cfg.sizes.size(); ++si) {
    const int64_t bytes = cfg.sizes[si];
    at::Tensor t = torch::empty({bytes / 4}, torch::kFloat);
    for (const auto& impl : impls) check_allreduce(impl, t, rank, world);
    t.zero_();  // sums of zeros stay zero: no denormals, no overflow

    const std::string key = "bench/collectives/" + std::to_string(si);
    std::vector<double> warm(k, 0.0);
    for (int64_t w = 0; w < cfg.warmup; ++w) {
      for (size_t i = 0; i < k; ++i) warm[i] += sample(impls[i], t);
    }
    int64_t iters = cfg.fixed_iters;
    if (iters == 0) {
      // Rank 0 decides from the slowest rank's warm-up; the others follow.
      double per_round = 0;
      if (cfg.warmup > 0) {
        for (double w : slowest_rank(*store, key + "/warmup", warm, rank, world)) per_round += w;
        per_round /= static_cast<double>(cfg.warmup);
      }
      if (rank == 0) {
        iters =
            per_round > 0 ? static_cast<int64_t>(cfg.budget_s * 1e6 / per_round) : cfg.max_iters;
        iters = std::clamp(iters, cfg.min_iters, cfg.max_iters);
        store->set(key + "/iters", to_bytes(std::to_string(iters)));
      } else {
        auto b = store->get(key + "/iters");
        iters = std::stoll(std::string(b.begin(), b.end()));
      }
    }

    std::vector<std::vector<double>> times(k);
    for (auto& v : times) v.reserve(static_cast<size_t>(iters));
    for (int64_t it = 0; it < iters; ++it) {
      for (size_t j = 0; j < k; ++j) {
        size_t i = it % 2 ? k - 1 - j : j;  // A B, then B A, ...
        times[i].push_back(sample(impls[i], t));
      }
    }

    std::string progress;
    for (size_t i = 0; i < k; ++i) {
      auto slowest = slowest_rank(*store, key + "/" + impls[i].name, times[i], rank, world);
      CollectivesRow row{impls[i].name, bytes, iters, summarize(slowest), slowest};
      progress += "  " + row.impl + " " + format_fixed(row.stats.median, 1) + " us";
      rows.push_back(row);
    }
    if (rank == 0) {
      std::fprintf(stderr, "collectives: %6s x %lld:%s\n", format_bytes(bytes).c_str(),
                   static_cast<long long>(iters), progress.c_str());
    }
  }

  // The store lives in rank 0: it leaves last.
  store->add("bench/collectives/done", 1);
  if (rank != 0) return 0;

  std::vector<std::string> names;
  for (const auto& impl : impls) names.push_back(impl.name);
  report_collectives(cfg, names, rows, world, bind);

  // Wait for the other ranks to finish with the store before it goes away.
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (store->add("bench/collectives/done", 0) < world && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return 0;
}

}  // namespace ddp_bench
