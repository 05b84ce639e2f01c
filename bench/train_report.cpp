// `ddp_bench train`'s report on rank 0: the markdown table on stdout (one
// row per measurement; the efficiency is limit / ddp with limit =
// max(local, allreduce)) and the JSON that bench/evaluate.py reads, with
// every sample.
#include "train_bench.h"

#include <torch/version.h>

#include <algorithm>
#include <cstdio>

namespace ddp_bench {
namespace {

Json stats_summary(const std::vector<double>& v) {
  Stats s = summarize(v);
  Json j = Json::object();
  j.set("median", s.median).set("min", s.min).set("max", s.max).set("mean", s.mean);
  return j;
}

}  // namespace

void report_train(const TrainConfig& cfg, TrainResults results) {
  const std::string torch_version = TORCH_VERSION;
  auto& samples = results.samples;
  auto& slowest = results.slowest;
  const auto& names = results.names;
  const auto& shapes = results.shapes;
  const auto& tx_ranks = results.tx_ranks;
  const int64_t elements = results.elements;
  const int64_t grad_bytes = elements * 4;
  const int world = results.world;
  const int blas_threads = results.blas_threads;
  auto has = [&](const char* impl) {
    return std::find(cfg.impls.begin(), cfg.impls.end(), impl) != cfg.impls.end();
  };
  auto median_of = [&](const std::string& impl) { return summarize(slowest[impl]).median; };
  const double limit =
      has("local") && has("allreduce") ? std::max(median_of("local"), median_of("allreduce")) : 0;

  std::vector<std::vector<std::string>> table;
  Json rows = Json::array();
  for (const auto& impl : cfg.impls) {
    const auto& v = samples[impl];
    Stats st = summarize(slowest[impl]);
    std::vector<std::string> line{impl, format_fixed(st.median, 1),
                                  format_fixed(st.min, 1) + "–" + format_fixed(st.max, 1)};
    Json row = Json::object();
    row.set("impl", impl).set("model", cfg.model.name).set("world_size", world);
    row.set("median_ms", st.median).set("min_ms", st.min).set("max_ms", st.max);
    row.set("mean_ms", st.mean).set("iters", static_cast<int64_t>(v.size()));
    Json raw = Json::array();
    for (double x : slowest[impl]) raw.push(x);
    row.set("samples_ms", std::move(raw));
    if (is_training_impl(impl)) {
      std::vector<double> zg, fw, bw, stp;
      for (const auto& s : v) {
        zg.push_back(s.split.zero_grad);
        fw.push_back(s.split.forward);
        bw.push_back(s.split.backward);
        stp.push_back(s.split.step);
      }
      Json split = Json::object();
      split.set("zero_grad_ms", stats_summary(zg)).set("forward_ms", stats_summary(fw));
      split.set("backward_ms", stats_summary(bw)).set("step_ms", stats_summary(stp));
      row.set("rank0_split", std::move(split));
      line.push_back(format_fixed(summarize(fw).median, 1));
      line.push_back(format_fixed(summarize(bw).median, 1));
      line.push_back(format_fixed(summarize(stp).median, 1));
      const auto& w = samples[impl + "/warmup"];
      row.set("first_loss", w.empty() ? v.front().loss : w.front().loss);
      row.set("last_loss", v.back().loss);
      if (impl != "local") row.set("bucket_fill_ops", v.back().stats.bucket_fill_ops);
    } else {
      line.insert(line.end(), {"", "", ""});
    }
    if (impl == "ddp") {
      std::vector<double> f, bc, cm, ov, fin;
      for (const auto& s : v) {
        f.push_back(s.stats.forward_ms);
        bc.push_back(s.stats.backward_compute_ms);
        cm.push_back(s.stats.communication_ms);
        ov.push_back(s.stats.overlapped_ms);
        fin.push_back(s.stats.finalize_ms);
      }
      row.set("forward_ms", summarize(f).median);
      row.set("backward_compute_ms", summarize(bc).median);
      row.set("communication_ms", summarize(cm).median);
      row.set("overlap_ms", summarize(ov).median);
      row.set("finalize_ms", summarize(fin).median);
      Json per_iter = Json::object();
      auto arr = [](const std::vector<double>& x) {
        Json a = Json::array();
        for (double d : x) a.push(d);
        return a;
      };
      per_iter.set("forward_ms", arr(f)).set("backward_compute_ms", arr(bc));
      per_iter.set("communication_ms", arr(cm)).set("overlap_ms", arr(ov));
      per_iter.set("finalize_ms", arr(fin));
      row.set("stats_rank0", std::move(per_iter));
      Json buckets = Json::array();
      for (int64_t b : v.back().stats.bucket_bytes) buckets.push(b);
      row.set("bucket_bytes", std::move(buckets));
      const ddp::BucketTuning& tuning = v.back().stats.bucket_tuning;
      if (tuning.phase != ddp::BucketTuning::Phase::kOff) {
        Json samples = Json::array();
        for (const auto& [cap, ms] : tuning.samples) {
          samples.push(Json::object().set("cap_bytes", cap).set("ms", ms));
        }
        row.set("bucket_tuning",
                Json::object()
                    .set("settled", tuning.phase == ddp::BucketTuning::Phase::kSettled)
                    .set("cap_bytes", tuning.cap_bytes)
                    .set("trial_iterations", tuning.trial_iterations)
                    .set("samples", std::move(samples)));
      }
      row.set("hook", cfg.hook);
      if (cfg.timeline) row.set("timeline", Json::raw(results.timeline->trace_events()));
      if (std::all_of(tx_ranks.begin(), tx_ranks.end(), [](double x) { return x >= 0; })) {
        Json tx = Json::array();
        double sum = 0;
        for (double x : tx_ranks) {
          tx.push(x);
          sum += x;
        }
        row.set("tx_bytes_per_iter_ranks", std::move(tx));
        row.set("tx_bytes_per_iter", sum / static_cast<double>(tx_ranks.size()));
      }
      line.push_back(
          format_fixed(summarize(f).median, 1) + " / " + format_fixed(summarize(bc).median, 1) +
          " / " + format_fixed(summarize(cm).median, 1) + " / " +
          format_fixed(summarize(ov).median, 1) + " / " + format_fixed(summarize(fin).median, 1));
      if (limit > 0) {
        row.set("limit_ms", limit).set("efficiency", limit / st.median);
        line.push_back(format_fixed(limit / st.median, 3));
      }
    }
    table.push_back(line);
    rows.push(std::move(row));
  }

  std::printf(
      "train %s, %d ranks, %zu parameters (%lld elements, %.1f MiB); %s\n\n%s",
      describe(cfg.model).c_str(), world, names.size(), static_cast<long long>(elements),
      grad_bytes / 1048576.0, machine_summary(torch_version).c_str(),
      markdown_table({"measurement", "median ms", "min–max ms", "fwd ms (rank 0)",
                      "bwd ms (rank 0)", "step ms (rank 0)",
                      "DDP stats fwd / bwd compute / comm / overlap / finalize ms", "efficiency"},
                     table, {false, true, true, true, true, true, true, true})
          .c_str());
  if (limit > 0) {
    std::printf("\nlimit = max(local %.1f, allreduce %.1f) = %.1f ms\n", median_of("local"),
                median_of("allreduce"), limit);
  }
  std::fflush(stdout);

  if (!cfg.json_path.empty()) {
    Json config = Json::object();
    config.set("model", cfg.model.name)
        .set("world_size", world)
        .set("batch_per_rank", cfg.model.batch);
    config.set("image_size", cfg.model.image_size).set("seq_len", cfg.model.seq_len);
    config.set("model_description", describe(cfg.model));
    config.set("process_groups", cfg.process_groups).set("sync_every", cfg.sync_every);
    if (cfg.bucket_cap_mb.is_auto()) {
      config.set("bucket_cap_mb", "auto");
    } else {
      config.set("bucket_cap_mb", cfg.bucket_cap_mb.mib());
    }
    config.set("first_bucket_cap_mb", cfg.first_bucket_cap_mb);
    config.set("iters", cfg.iters).set("warmup", cfg.warmup).set("lr", cfg.lr);
    config.set("seed", cfg.seed).set("intra_op_threads", cfg.threads);
    config.set("openblas_threads", blas_threads);
    config.set("gloo_threads", cfg.gloo_threads).set("overlap", cfg.overlap);
    config.set("gradient_as_bucket_view", cfg.gradient_as_bucket_view);
    config.set("hook", cfg.hook);
    config.set("method",
               "two phases, ddp+local then allreduce+allreduce_buckets, each interleaved by "
               "iteration (order reversed every other iteration); an untimed "
               "1-element allreduce before each sample; a sample's time is the slowest rank's; "
               "iteration = zero_grad + sync_every x (forward + loss + backward, all but the "
               "last under no_sync) + SGD step");
    Json params = Json::object();
    params.set("count", static_cast<int64_t>(names.size())).set("elements", elements);
    Json list = Json::array();
    for (size_t i = 0; i < names.size(); ++i) {
      std::string s = names[i] + " [";
      for (size_t d = 0; d < shapes[i].size(); ++d)
        s += (d ? ", " : "") + std::to_string(shapes[i][d]);
      list.push(s + "]");
    }
    params.set("list", std::move(list));
    Json out = Json::object();
    out.set("benchmark", "train").set("side", "ddp");
    if (!cfg.tag.empty()) out.set("tag", cfg.tag);
    add_machine_and_config(out, torch_version, std::move(config));
    out.set("parameters", std::move(params));
    out.set("rows", std::move(rows));
    write_result("train", cfg.json_path, out);
  }
}

}  // namespace ddp_bench
