// `paper_bench split`: the paper's Fig. 2 (a, b) — the total time to allreduce
// a fixed number of float32 elements (60M, as in the paper) when they are
// split into tensors of S elements, for each S: many small allreduces pay a
// per-operation cost, a few large ones use the bandwidth. This is why DDP
// buckets gradients (paper §3.2.3, §5).
//
// Method. For each split size S, the --total elements are views into one
// flat buffer, cut into ceil(total / S) consecutive tensors (the last may be
// shorter); the buffer (total x 4 bytes, e.g. 240 MB) is allocated once and
// shared by both implementations, the views once per split, outside the
// timing. A sample launches an asynchronous allreduce(SUM) of every tensor,
// then waits for all of them, as DDP's reduction does: its time runs from
// just before the first launch to the return of the last wait. Before each
// sample a 1-element allreduce on the same group makes the ranks start
// together; a sample's time is the slowest rank's (a MAX allreduce of all
// samples at the end of each split). Per split, each implementation runs
// max(--warmup, 1) untimed samples, the first of them checked (every
// element's sum compared with the expected one; a wrong result ends the
// run), then --rounds timed ones, interleaved: ddp, c10d, then c10d, ddp, ...
#include "c10d_group.h"
#include "paper_subcommands.h"

#include <ddp/init.h>

#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace ddp_bench {

const char* const kSplitUsage = R"(usage: paper_bench split [options]
Run once per rank (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the
environment), e.g. ddprun --nproc-per-node 2 paper_bench split.
The paper's Fig. 2 (a, b): allreduce(SUM) of --total float32 elements split
into tensors of S elements, for each S in --splits; all tensors launched
asynchronously, then all waited for; ddp's Gloo group ("ddp") against
libtorch's c10d::ProcessGroupGloo ("c10d"), interleaved. Rank 0 prints a
markdown table (ms, slowest rank) and writes JSON.
Element counts take decimal suffixes: K = 1,000, M = 1,000,000, G = 10^9.

options:
  --total N         elements in all (default 60M = 60,000,000: 240 MB, held
                    once per rank and shared by both implementations)
  --splits LIST     elements per tensor (default 1K,4K,16K,64K,256K,1M,4M,16M,60M);
                    the last tensor of a split may be shorter; a split above
                    --total becomes --total (one tensor)
  --rounds R        timed samples per implementation and split (default 5)
  --warmup W        untimed samples per implementation and split, the first
                    one checked; at least 1 runs (default 1)
  --gloo-threads G  worker threads of each process group (default 1)
  --threads T       intra-op threads per rank, torch::set_num_threads (default 1)
  --impls LIST      ddp,c10d (default both)
  --json PATH       rank 0 writes the results there (every sample included)
The small splits dominate the run time: at about 1 ms per small allreduce
(2 ranks sharing 2 cores), the default 1K split is 60,000 allreduces, about a
minute per sample and implementation. --total 6M runs in about a minute.
)";

namespace {

// "60M" -> 60000000; K, M, G are decimal (1e3, 1e6, 1e9).
int64_t parse_count(const std::string& text) {
  if (auto count = parse_scaled(text, 1000)) return *count;
  throw UsageError("bad element count '" + text + "' (a positive integer, e.g. 4096, 4K, 16M)");
}

// 1000 -> "1K", 60000000 -> "60M", 1500 -> "1500".
std::string format_count(int64_t n) {
  if (n >= 1000000 && n % 1000000 == 0) return std::to_string(n / 1000000) + "M";
  if (n >= 1000 && n % 1000 == 0) return std::to_string(n / 1000) + "K";
  return std::to_string(n);
}

struct Config {
  int64_t total = 60 * 1000 * 1000;
  std::vector<int64_t> splits;
  int64_t rounds = 5;
  int64_t warmup = 1;
  int64_t gloo_threads = 1;
  int64_t threads = 1;
  std::vector<std::string> impls;
  std::string json_path;
};

Config parse(Args& args) {
  Config c;
  if (auto t = args.take("--total")) c.total = parse_count(*t);
  std::stringstream list(args.take("--splits").value_or("1K,4K,16K,64K,256K,1M,4M,16M,60M"));
  for (std::string item; std::getline(list, item, ',');) {
    const int64_t s = std::min(parse_count(item), c.total);
    if (std::find(c.splits.begin(), c.splits.end(), s) == c.splits.end()) c.splits.push_back(s);
  }
  if (c.splits.empty()) throw UsageError("--splits is empty");
  c.rounds = args.take_int("--rounds", 1, 1000000).value_or(c.rounds);
  c.warmup = args.take_int("--warmup", 0, 1000000).value_or(c.warmup);
  c.gloo_threads = args.take_int("--gloo-threads", 1, 64).value_or(c.gloo_threads);
  c.threads = args.take_int("--threads", 1, 1024).value_or(c.threads);
  c.impls = args.take_names("--impls", "ddp,c10d", {"ddp", "c10d"});
  c.json_path = args.take("--json").value_or("");
  args.expect_empty();
  return c;
}

// One implementation: launch an allreduce(SUM) of every tensor, wait for all.
struct Impl {
  std::string name;
  // Called once per split, outside the timing: prepares its own handles.
  std::function<void(const std::vector<at::Tensor>&)> set_tensors;
  std::function<void()> allreduce_all;
  std::function<void()> sync;  // a 1-element allreduce on the same group
};

// Rank r contributes (r + 1) + (i % 7) at element i of the buffer: the sum,
// n(n+1)/2 + n(i % 7), is exact in float32 and a misplaced tensor shows.
void fill_pattern(at::Tensor& flat, int rank) {
  float* p = flat.data_ptr<float>();
  for (int64_t i = 0, n = flat.numel(); i < n; ++i) p[i] = static_cast<float>(rank + 1 + i % 7);
}

void check_pattern(const at::Tensor& flat, const std::string& impl, int64_t split, int rank,
                   int world) {
  const float* p = flat.data_ptr<float>();
  const double base = world * (world + 1) / 2.0;
  for (int64_t i = 0, n = flat.numel(); i < n; ++i) {
    const double expected = base + world * static_cast<double>(i % 7);
    if (p[i] != expected) {
      std::ostringstream msg;
      msg << "WRONG RESULT: rank " << rank << ": " << impl << " allreduce(SUM) split into "
          << format_count(split) << "-element tensors gave " << p[i] << " at element " << i
          << " (tensor " << i / split << "), expected " << expected;
      throw std::runtime_error(msg.str());
    }
  }
}

struct Row {
  std::string impl;
  int64_t split = 0, tensors = 0;
  Stats stats;
  std::vector<double> samples_ms;  // slowest rank, in the order taken
};

}  // namespace

int run_split(Args args) {
  const Config cfg = parse(args);
  torch::set_num_threads(static_cast<int>(cfg.threads));

  // ddp's group as ddp::init_process_group makes it (rendezvous, then the
  // group), keeping the store for c10d's group.
  ddp::InitOptions init = ddp_bench::init_options(static_cast<int>(cfg.gloo_threads));
  ddp::StorePtr store = ddp::rendezvous(init);
  const int rank = init.rank(), world = init.world_size();
  ddp::ProcessGroupPtr ddp_pg = ddp::new_process_group(store, rank, world, init);
  c10::intrusive_ptr<c10d::ProcessGroupGloo> c10d_pg;
  const std::string bind = c10d_bind_description(init);

  at::Tensor one = torch::zeros({1}, torch::kFloat);
  std::vector<at::Tensor> ddp_tensors;
  std::vector<ddp::WorkPtr> ddp_works;
  std::vector<std::vector<at::Tensor>> c10d_inputs;  // c10d takes a vector per call
  std::vector<c10::intrusive_ptr<c10d::Work>> c10d_works;
  std::vector<at::Tensor> c10d_one{one};

  std::vector<Impl> impls;
  for (const auto& name : cfg.impls) {
    if (name == "ddp") {
      impls.push_back({"ddp",
                       [&](const std::vector<at::Tensor>& ts) {
                         ddp_tensors = ts;
                         ddp_works.clear();
                         ddp_works.reserve(ts.size());
                       },
                       [&] {
                         ddp_works.clear();
                         for (const auto& t : ddp_tensors)
                           ddp_works.push_back(ddp_pg->allreduce(t));
                         for (const auto& w : ddp_works) w->wait();
                       },
                       [&] { ddp_pg->allreduce(one)->wait(); }});
    } else {
      c10d_pg = make_c10d_gloo(store, init, static_cast<int>(cfg.gloo_threads));
      impls.push_back({"c10d",
                       [&](const std::vector<at::Tensor>& ts) {
                         c10d_inputs.clear();
                         for (const auto& t : ts) c10d_inputs.push_back({t});
                         c10d_works.clear();
                         c10d_works.reserve(ts.size());
                       },
                       [&] {
                         c10d_works.clear();
                         for (auto& v : c10d_inputs) c10d_works.push_back(c10d_pg->allreduce(v));
                         for (const auto& w : c10d_works) w->wait();
                       },
                       [&] { c10d_pg->allreduce(c10d_one)->wait(); }});
    }
  }

  const std::string torch_version = TORCH_VERSION;
  if (rank == 0) {
    std::fprintf(stderr,
                 "split: %s float32 elements (%.0f MB) in all, %d ranks, %lld gloo thread(s), "
                 "bind %s; %s\n",
                 format_count(cfg.total).c_str(), cfg.total * 4 / 1e6, world,
                 static_cast<long long>(cfg.gloo_threads), bind.c_str(),
                 machine_summary(torch_version).c_str());
  }

  at::Tensor flat = torch::empty({cfg.total}, torch::kFloat);
  std::vector<Row> rows;
  const size_t k = impls.size();
  for (int64_t split : cfg.splits) {
    std::vector<at::Tensor> tensors;
    for (int64_t off = 0; off < cfg.total; off += split) {
      tensors.push_back(flat.narrow(0, off, std::min(split, cfg.total - off)));
    }
    for (auto& impl : impls) {
      impl.set_tensors(tensors);
      fill_pattern(flat, rank);
      impl.sync();
      impl.allreduce_all();  // the first warm-up sample, checked
      check_pattern(flat, impl.name, split, rank, world);
    }
    flat.zero_();  // sums of zeros stay zero: no denormals, no overflow

    std::vector<std::vector<double>> times(k);
    const int64_t warmup = std::max<int64_t>(cfg.warmup, 1);
    for (int64_t r = 1; r < warmup + cfg.rounds; ++r) {
      for (size_t j = 0; j < k; ++j) {
        Impl& impl = impls[r % 2 ? k - 1 - j : j];  // A B, then B A, ...
        impl.sync();
        const auto t0 = Clock::now();
        impl.allreduce_all();
        const double ms = ms_since(t0);
        if (r >= warmup) times[r % 2 ? k - 1 - j : j].push_back(ms);
      }
    }

    std::string progress;
    for (size_t i = 0; i < k; ++i) {
      at::Tensor t = torch::from_blob(times[i].data(), {static_cast<int64_t>(times[i].size())},
                                      torch::kDouble);
      ddp_pg->allreduce(t, ddp::ReduceOp::MAX)->wait();  // the slowest rank's, per sample
      Row row{impls[i].name, split, static_cast<int64_t>(tensors.size()), summarize(times[i]),
              times[i]};
      progress += "  " + row.impl + " " + format_fixed(row.stats.median, 1) + " ms";
      rows.push_back(std::move(row));
    }
    if (rank == 0) {
      std::fprintf(stderr, "split: %5s x %7zu:%s\n", format_count(split).c_str(), tensors.size(),
                   progress.c_str());
    }
  }

  ddp_pg->barrier()->wait();  // all done with both groups and the store
  if (rank != 0) return 0;

  auto find = [&](const std::string& impl, int64_t split) -> const Row* {
    for (const auto& r : rows) {
      if (r.impl == impl && r.split == split) return &r;
    }
    return nullptr;
  };
  const bool both = k == 2;
  std::vector<std::string> header{"split (elements)", "tensors"};
  std::vector<bool> right{false, true};
  for (const auto& impl : impls) {
    header.push_back(impl.name + " median ms");
    header.push_back(impl.name + " min–max ms");
    right.insert(right.end(), {true, true});
  }
  if (both) {
    header.push_back("ddp/c10d");
    right.push_back(true);
  }
  std::vector<std::vector<std::string>> table;
  Json json_rows = Json::array();
  for (int64_t split : cfg.splits) {
    std::vector<std::string> line{format_count(split),
                                  std::to_string(find(impls[0].name, split)->tensors)};
    for (const auto& impl : impls) {
      const Row& r = *find(impl.name, split);
      line.push_back(format_fixed(r.stats.median, 1));
      line.push_back(format_fixed(r.stats.min, 1) + "–" + format_fixed(r.stats.max, 1));
      Json j = Json::object();
      j.set("impl", r.impl).set("split_elements", r.split).set("tensors", r.tensors);
      j.set("median_ms", r.stats.median).set("min_ms", r.stats.min).set("max_ms", r.stats.max);
      Json samples = Json::array();
      for (double v : r.samples_ms) samples.push(v);
      j.set("samples_ms", std::move(samples));
      json_rows.push(std::move(j));
    }
    if (both) {
      line.push_back(
          format_fixed(find("ddp", split)->stats.median / find("c10d", split)->stats.median, 3));
    }
    table.push_back(line);
  }

  std::printf(
      "allreduce(SUM) of %s float32 elements (%.0f MB) split into tensors of S elements "
      "(K = 1000, M = 10^6), all launched then all waited; %d ranks, %lld gloo thread(s); "
      "slowest rank, %lld samples; %s\n\n%s",
      format_count(cfg.total).c_str(), cfg.total * 4 / 1e6, world,
      static_cast<long long>(cfg.gloo_threads), static_cast<long long>(cfg.rounds),
      machine_summary(torch_version).c_str(), markdown_table(header, table, right).c_str());
  std::fflush(stdout);

  if (!cfg.json_path.empty()) {
    Json config = Json::object();
    Json splits = Json::array();
    for (int64_t s : cfg.splits) splits.push(s);
    config.set("collective", "allreduce").set("op", "SUM").set("dtype", "float32");
    config.set("total_elements", cfg.total).set("split_elements", std::move(splits));
    config.set("world_size", world).set("rounds", cfg.rounds).set("warmup", cfg.warmup);
    config.set("gloo_threads", cfg.gloo_threads).set("intra_op_threads", cfg.threads);
    config.set("bind", bind);
    config.set("method",
               "per split: ceil(total/split) consecutive views of one flat buffer; a sample "
               "launches an async allreduce of every tensor then waits for all, timed from "
               "just before the first launch to the return of the last wait; a 1-element "
               "allreduce on the same group before each sample; a sample's time is the "
               "slowest rank's; max(warmup, 1) untimed samples, the first checked, then rounds, "
               "interleaved "
               "ddp,c10d then c10d,ddp; K = 1000, M = 10^6 elements");
    Json out = Json::object();
    out.set("benchmark", "split");
    add_machine_and_config(out, torch_version, std::move(config));
    out.set("rows", std::move(json_rows));
    write_result("split", cfg.json_path, out);
  }
  return 0;
}

}  // namespace ddp_bench
