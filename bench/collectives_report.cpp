// `ddp_bench collectives`' report on rank 0: per size, each
// implementation's median, its ratio to its baseline (c10d; mpi-raw for
// ddp's mpi backend) as a ratio of medians and as a median of paired ratios,
// bus bandwidth (and its share of a shaped link), min-max; then the JSON.
#include "collectives_bench.h"

#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace ddp_bench {
namespace {

// What each backend is measured against: c10d's Gloo, and for ddp's MPI
// backend also MPI_Allreduce called directly.
std::vector<std::pair<std::string, std::string>> ratio_pairs(
    const std::vector<std::string>& impls) {
  auto has = [&](const std::string& n) {
    return std::find(impls.begin(), impls.end(), n) != impls.end();
  };
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& name : impls) {
    if (name == "c10d" || name == "mpi-raw") continue;
    if (has("c10d")) pairs.emplace_back(name, "c10d");
    if (name == "mpi" && has("mpi-raw")) pairs.emplace_back(name, "mpi-raw");
  }
  return pairs;
}

// The median over pairs of a[i] / b[i]: samples i of both were taken back to
// back, so a slow phase of the machine (other processes on few cores) hits
// both and cancels out, where a ratio of medians can land in different modes.
double paired_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) r.push_back(a[i] / b[i]);
  return summarize(r).median;
}

}  // namespace

void report_collectives(const CollectivesConfig& cfg, const std::vector<std::string>& impls,
                        const std::vector<CollectivesRow>& rows, int world,
                        const std::string& bind) {
  const std::string torch_version = TORCH_VERSION;
  const auto pairs = ratio_pairs(impls);
  const double link_bps = link_rate_bits_per_s();
  auto find = [&](const std::string& impl, int64_t bytes) -> const CollectivesRow* {
    for (const auto& r : rows) {
      if (r.impl == impl && r.bytes == bytes) return &r;
    }
    return nullptr;
  };

  std::vector<std::string> header{"size"};
  std::vector<bool> right{false};
  for (const auto& impl : impls) {
    header.push_back(impl + " median µs");
    right.push_back(true);
  }
  for (const auto& [a, b] : pairs) {
    header.push_back(a + "/" + b + " medians");
    header.push_back(a + "/" + b + " paired");
    right.push_back(true);
    right.push_back(true);
  }
  for (const auto& impl : impls) {
    header.push_back(impl + " busbw GB/s");
    right.push_back(true);
  }
  if (link_bps > 0) {
    for (const auto& impl : impls) {
      header.push_back(impl + " busbw/link");
      right.push_back(true);
    }
  }
  for (const auto& impl : impls) {
    header.push_back(impl + " min–max µs");
    right.push_back(true);
  }
  header.push_back("samples");
  right.push_back(true);

  std::vector<std::vector<std::string>> table;
  Json json_rows = Json::array();
  Json json_ratios = Json::array();  // gloo/c10d per size (the key predates other backends)
  Json json_pairs = Json::array();   // every pair of ratio_pairs, per size
  for (int64_t bytes : cfg.sizes) {
    std::vector<std::string> line{format_bytes(bytes)};
    for (const auto& impl : impls) line.push_back(format_fixed(find(impl, bytes)->stats.median, 1));
    for (const auto& [impl, baseline] : pairs) {
      const CollectivesRow& a = *find(impl, bytes);
      const CollectivesRow& b = *find(baseline, bytes);
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
      line.push_back(
          format_fixed(allreduce_busbw_gbps(bytes, find(impl, bytes)->stats.median, world), 3));
    }
    if (link_bps > 0) {
      for (const auto& impl : impls) {
        double busbw = allreduce_busbw_gbps(bytes, find(impl, bytes)->stats.median, world);
        line.push_back(format_fixed(100.0 * busbw * 1e9 / (link_bps / 8), 1) + "%");
      }
    }
    for (const auto& impl : impls) {
      const Stats& s = find(impl, bytes)->stats;
      line.push_back(format_fixed(s.min, 1) + "–" + format_fixed(s.max, 1));
    }
    line.push_back(std::to_string(find(impls[0], bytes)->iters));
    table.push_back(line);

    for (const auto& impl : impls) {
      const CollectivesRow& r = *find(impl, bytes);
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
    add_machine_and_config(out, torch_version, std::move(config));
    out.set("rows", std::move(json_rows));
    if (!pairs.empty()) out.set("ratios", std::move(json_pairs));
    if (find("gloo", cfg.sizes[0]) && find("c10d", cfg.sizes[0])) {
      out.set("ddp_over_c10d", std::move(json_ratios));
    }
    write_result("collectives", cfg.json_path, out);
  }
}

}  // namespace ddp_bench
