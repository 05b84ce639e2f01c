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
// pairs fit in --budget-s per size (between --min-iters and --max-iters), and
// rank 0 tells the others.
#include "c10d_group.h"
#include "mpi_raw.h"
#include "subcommands.h"

#include <ddp/backend.h>
#include <ddp/backends/gloo.h>
#include <ddp/init.h>

#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <thread>

namespace ddp_bench {

const char* const kCollectivesUsage = R"(usage: ddp_bench collectives [options]
Run once per rank (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the
environment), e.g. ddprun --nproc-per-node 2 ddp_bench collectives. With mpi
or mpi-raw, run under mpirun and set MASTER_ADDR/MASTER_PORT yourself, e.g.
  mpirun -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 \
    ddp_bench collectives --impls gloo,mpi,mpi-raw,c10d
Times allreduce(SUM, float32) of each size with ddp's backends (by name),
libtorch's c10d::ProcessGroupGloo ("c10d") and MPI_Allreduce called directly
("mpi-raw"), interleaved; rank 0 prints a markdown table and writes JSON.

options:
  --sizes LIST      byte sizes, e.g. 4K,64K,1M,16M,256M
                    (default: 4K,16K,64K,256K,1M,4M,16M,64M,256M)
  --iters N         samples per implementation and size (default: as many as
                    fit in --budget-s, between --min-iters and --max-iters)
  --min-iters N     default 5
  --max-iters N     default 500
  --budget-s S      seconds of timed samples per size, both implementations
                    together, when --iters is not given (default 10)
  --warmup W        untimed samples per implementation and size (default 2)
  --threads T       intra-op threads per rank, torch::set_num_threads (default 1)
  --gloo-threads G  worker threads of each process group (default 1)
  --impls LIST      any of the registered backends (ddp::backend_names()),
                    c10d, mpi-raw (default gloo,c10d)
  --json PATH       rank 0 writes the results there
  --raw             also write every sample (µs, slowest rank) to the JSON
)";

namespace {

struct Config {
  std::vector<int64_t> sizes;
  int64_t fixed_iters = 0;  // 0: scale by budget
  int64_t min_iters = 5;
  int64_t max_iters = 500;
  double budget_s = 10.0;
  int64_t warmup = 2;
  int64_t threads = 1;
  int64_t gloo_threads = 1;
  std::vector<std::string> impls;
  std::string json_path;
  bool raw = false;
};

Config parse(Args& args) {
  Config c;
  c.sizes = parse_byte_list(args.take("--sizes").value_or("4K,16K,64K,256K,1M,4M,16M,64M,256M"));
  for (int64_t s : c.sizes) {
    if (s % 4 != 0) throw UsageError("size " + std::to_string(s) + " is not a multiple of 4 (float32)");
    if (std::count(c.sizes.begin(), c.sizes.end(), s) > 1) {
      throw UsageError("size " + format_bytes(s) + " is given twice");
    }
  }
  c.fixed_iters = args.take_int("--iters", 1, 1000000).value_or(0);
  c.min_iters = args.take_int("--min-iters", 1, 1000000).value_or(c.min_iters);
  c.max_iters = args.take_int("--max-iters", 1, 1000000).value_or(c.max_iters);
  if (c.max_iters < c.min_iters) throw UsageError("--max-iters is below --min-iters");
  c.budget_s = args.take_double("--budget-s", 0.0).value_or(c.budget_s);
  c.warmup = args.take_int("--warmup", 0, 1000000).value_or(c.warmup);
  c.threads = args.take_int("--threads", 1, 1024).value_or(c.threads);
  c.gloo_threads = args.take_int("--gloo-threads", 1, 64).value_or(c.gloo_threads);
  std::vector<std::string> known = ddp::backend_names();
  known.push_back("c10d");
  known.push_back("mpi-raw");
  std::stringstream impls(args.take("--impls").value_or("gloo,c10d"));
  for (std::string name; std::getline(impls, name, ',');) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw UsageError("unknown implementation '" + name + "'; this build has: " + list);
    }
    if (std::find(c.impls.begin(), c.impls.end(), name) == c.impls.end()) c.impls.push_back(name);
  }
  if (c.impls.empty()) throw UsageError("--impls is empty");
  c.json_path = args.take("--json").value_or("");
  c.raw = args.take_flag("--raw");
  args.expect_empty();
  return c;
}

// One implementation: a blocking allreduce(SUM) in place.
struct Impl {
  std::string name;
  std::function<void(at::Tensor&)> allreduce;
};

// What each backend is measured against: c10d's Gloo, and for ddp's MPI
// backend also MPI_Allreduce called directly.
std::vector<std::pair<std::string, std::string>> ratio_pairs(const std::vector<std::string>& impls) {
  auto has = [&](const std::string& n) { return std::find(impls.begin(), impls.end(), n) != impls.end(); };
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& name : impls) {
    if (name == "c10d" || name == "mpi-raw") continue;
    if (has("c10d")) pairs.emplace_back(name, "c10d");
    if (name == "mpi" && has("mpi-raw")) pairs.emplace_back(name, "mpi-raw");
  }
  return pairs;
}

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

// The median over pairs of a[i] / b[i]: samples i of both were taken back to
// back, so a slow phase of the machine (other processes on few cores) hits
// both and cancels out, where a ratio of medians can land in different modes.
double paired_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) r.push_back(a[i] / b[i]);
  return summarize(r).median;
}

struct Row {
  std::string impl;
  int64_t bytes;
  int64_t iters;
  Stats stats;
  std::vector<double> samples;  // µs, slowest rank, in the order taken
};

}  // namespace

int run_collectives(Args args) {
  const Config cfg = parse(args);
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
    } else if (name == "mpi-raw") {
      raw_mpi = std::make_unique<RawMpiAllreduce>();
      impls.push_back({"mpi-raw", [&raw_mpi](at::Tensor& t) { raw_mpi->allreduce(t); }});
    } else {
      ddp::InitOptions o = init;
      o.backend(name);
      o.backend_options(nullptr);  // the backend's defaults, but Gloo's worker threads:
      if (name == "gloo") {
        o.backend_options(std::make_shared<ddp::GlooOptions>(
            ddp::GlooOptions().threads(static_cast<int>(cfg.gloo_threads))));
      }
      auto pg = ddp::new_process_group(store, rank, world, o);
      ddp_groups.push_back(pg);
      impls.push_back({name, [pg](at::Tensor& t) { pg->allreduce(t)->wait(); }});
    }
  }
  const auto pairs = ratio_pairs(cfg.impls);

  const std::string torch_version = TORCH_VERSION;
  if (rank == 0) {
    std::fprintf(stderr,
                 "collectives: %d ranks, %lld intra-op thread(s), %lld gloo thread(s), bind %s; %s\n",
                 world, static_cast<long long>(cfg.threads),
                 static_cast<long long>(cfg.gloo_threads), bind.c_str(),
                 machine_summary(torch_version).c_str());
  }

  at::Tensor sync = torch::zeros({1}, torch::kFloat);
  auto sample = [&](const Impl& impl, at::Tensor& t) {
    impl.allreduce(sync);  // start together
    auto t0 = Clock::now();
    impl.allreduce(t);
    return micros_between(t0, Clock::now());
  };

  std::vector<Row> rows;
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
        iters = per_round > 0 ? static_cast<int64_t>(cfg.budget_s * 1e6 / per_round)
                              : cfg.max_iters;
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
      Row row{impls[i].name, bytes, iters, summarize(slowest), slowest};
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

  const double link_bps = link_rate_bits_per_s();
  auto find = [&](const std::string& impl, int64_t bytes) -> const Row* {
    for (const auto& r : rows) {
      if (r.impl == impl && r.bytes == bytes) return &r;
    }
    return nullptr;
  };

  std::vector<std::string> header{"size"};
  std::vector<bool> right{false};
  for (const auto& impl : impls) {
    header.push_back(impl.name + " median µs");
    right.push_back(true);
  }
  for (const auto& [a, b] : pairs) {
    header.push_back(a + "/" + b + " medians");
    header.push_back(a + "/" + b + " paired");
    right.push_back(true);
    right.push_back(true);
  }
  for (const auto& impl : impls) {
    header.push_back(impl.name + " busbw GB/s");
    right.push_back(true);
  }
  if (link_bps > 0) {
    for (const auto& impl : impls) {
      header.push_back(impl.name + " busbw/link");
      right.push_back(true);
    }
  }
  for (const auto& impl : impls) {
    header.push_back(impl.name + " min–max µs");
    right.push_back(true);
  }
  header.push_back("samples");
  right.push_back(true);

  std::vector<std::vector<std::string>> table;
  Json json_rows = Json::array();
  Json json_ratios = Json::array();   // gloo/c10d per size (the key predates other backends)
  Json json_pairs = Json::array();    // every pair of ratio_pairs, per size
  for (int64_t bytes : cfg.sizes) {
    std::vector<std::string> line{format_bytes(bytes)};
    for (const auto& impl : impls) line.push_back(format_fixed(find(impl.name, bytes)->stats.median, 1));
    for (const auto& [impl, baseline] : pairs) {
      const Row& a = *find(impl, bytes);
      const Row& b = *find(baseline, bytes);
      const double of_medians = a.stats.median / b.stats.median;
      const double paired = paired_ratio(a.samples, b.samples);
      line.push_back(format_fixed(of_medians, 3));
      line.push_back(format_fixed(paired, 3));
      Json j = Json::object();
      j.set("bytes", bytes).set("ratio_of_medians", of_medians).set("median_paired_ratio", paired);
      if (impl == "gloo" && baseline == "c10d") json_ratios.push(j);
      j.set("impl", impl).set("baseline", baseline);
      json_pairs.push(std::move(j));
    }
    for (const auto& impl : impls) {
      line.push_back(format_fixed(
          allreduce_busbw_gbps(bytes, find(impl.name, bytes)->stats.median, world), 3));
    }
    if (link_bps > 0) {
      for (const auto& impl : impls) {
        double busbw = allreduce_busbw_gbps(bytes, find(impl.name, bytes)->stats.median, world);
        line.push_back(format_fixed(100.0 * busbw * 1e9 / (link_bps / 8), 1) + "%");
      }
    }
    for (const auto& impl : impls) {
      const Stats& s = find(impl.name, bytes)->stats;
      line.push_back(format_fixed(s.min, 1) + "–" + format_fixed(s.max, 1));
    }
    line.push_back(std::to_string(find(impls[0].name, bytes)->iters));
    table.push_back(line);

    for (const auto& impl : impls) {
      const Row& r = *find(impl.name, bytes);
      Json j = Json::object();
      j.set("impl", r.impl).set("bytes", r.bytes).set("world_size", world);
      j.set("median_us", r.stats.median).set("min_us", r.stats.min).set("max_us", r.stats.max);
      j.set("mean_us", r.stats.mean).set("samples", r.iters);
      j.set("algbw_GBps", algbw_gbps(r.bytes, r.stats.median));
      j.set("busbw_GBps", allreduce_busbw_gbps(r.bytes, r.stats.median, world));
      if (link_bps > 0) {
        j.set("busbw_link_fraction",
              allreduce_busbw_gbps(r.bytes, r.stats.median, world) * 1e9 / (link_bps / 8));
      }
      if (cfg.raw) {
        Json raw = Json::array();
        for (double v : r.samples) raw.push(v);
        j.set("samples_us", std::move(raw));
      }
      json_rows.push(std::move(j));
    }
  }

  std::printf("allreduce(SUM, float32), %d ranks; %s\n\n%s", world,
              machine_summary(torch_version).c_str(), markdown_table(header, table, right).c_str());
  std::fflush(stdout);

  if (!cfg.json_path.empty()) {
    Json config = Json::object();
    Json sizes = Json::array();
    for (int64_t s : cfg.sizes) sizes.push(s);
    config.set("collective", "allreduce").set("op", "SUM").set("dtype", "float32");
    config.set("world_size", world).set("sizes", std::move(sizes));
    config.set("iters", cfg.fixed_iters ? Json(cfg.fixed_iters) : Json("auto"));
    config.set("min_iters", cfg.min_iters).set("max_iters", cfg.max_iters);
    config.set("budget_s", cfg.budget_s).set("warmup", cfg.warmup);
    config.set("intra_op_threads", cfg.threads).set("gloo_threads", cfg.gloo_threads);
    config.set("bind", bind);
    config.set("method",
               "interleaved pairs A B, B A, ...; a 1-element allreduce on the same group "
               "before each sample; a sample's time is the slowest rank's; busbw = "
               "bytes/median * 2(n-1)/n, GB = 1e9 bytes; median_paired_ratio = median over "
               "pairs i of impl[i]/baseline[i]");
    Json out = Json::object();
    out.set("benchmark", "collectives");
    out.set("machine", describe_machine(torch_version));
    out.set("config", std::move(config));
    out.set("rows", std::move(json_rows));
    if (!pairs.empty()) out.set("ratios", std::move(json_pairs));
    if (find("gloo", cfg.sizes[0]) && find("c10d", cfg.sizes[0])) {
      out.set("ddp_over_c10d", std::move(json_ratios));
    }
    write_file(cfg.json_path, out.dump());
    std::fprintf(stderr, "collectives: wrote %s\n", cfg.json_path.c_str());
  }

  // Wait for the other ranks to finish with the store before it goes away.
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (store->add("bench/collectives/done", 0) < world && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return 0;
}

}  // namespace ddp_bench
