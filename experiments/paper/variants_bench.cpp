// `paper_bench variants`: the blog's table (dudeperf3ct's post on implementing
// data parallelism in PyTorch, named in variants.h) in C++: five
// hand-written data-parallel variants and ddp's
// DistributedDataParallel (variants.h) train the same model on the
// same data, and each micro-batch's timeline (bench/timeline.h, rank 0's
// in the JSON) gives the blog's columns (compute %, non-compute %, idle %,
// overlap %, communication overhead %, allreduce calls and ms per
// micro-batch: `experiments/paper/evaluate.py timeline RUN.json`).
//
// Method. Every variant trains its own copy of the model (same seed, so
// the same initial weights; rank r's micro-batch m of each window uses data
// seed 1000·seed + 1 + r·accum + m). A window is --accum micro-batches (one
// optimizer step for the accumulating variants; `simple` steps after every
// micro-batch), preceded by an untimed 1-element allreduce so that the ranks
// start it together. A round runs --iters micro-batches of every variant,
// the variants in order, reversed every other round; --warmup rounds first
// are untimed. A sample is one window's time divided by --accum (ms per
// micro-batch), the slowest rank's. Afterwards every variant's final parameters are
// compared across ranks (checksums: sum, sum of squares and a
// position-weighted sum per tensor, MAX against MIN allreduce: must be
// equal) and, for the accumulating variants, against simple_ga's
// (max |Δ| over all ranks; same arithmetic up to summation order, so 0 or
// tiny: flagged above 1e-3 of how far training moved simple_ga's
// parameters). A failed check makes the exit status 1.
//
// This file runs the variants and reports; the command line is
// variants_config.cpp's and the parameter check variants_check.cpp's (both
// in variants_bench.h).
#include "paper_subcommands.h"
#include "variants.h"
#include "variants_bench.h"

#include <ddp/init.h>

#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>

namespace ddp_bench {

int run_variants(Args args) {
  const VariantsConfig cfg = parse_variants_config(args);
  torch::set_num_threads(static_cast<int>(cfg.threads));
  const int blas_threads = limit_openblas_threads(static_cast<int>(cfg.threads));

  ddp::InitOptions init = ddp_bench::init_options(static_cast<int>(cfg.gloo_threads));
  ddp::ProcessGroupPtr pg = ddp::init_process_group(init);
  const int rank = pg->rank(), world = pg->size();
  const std::string torch_version = TORCH_VERSION;

  // The data: --accum micro-batches per rank, reused every window.
  std::vector<ModelBatch> batches;
  for (int64_t m = 0; m < cfg.accum; ++m) {
    batches.push_back(make_batch(
        cfg.model, static_cast<uint64_t>(cfg.model.seed * 1000 + 1 + rank * cfg.accum + m)));
  }
  const LossFn loss_fn = [&](const torch::Tensor& out, const torch::Tensor& target) {
    return model_loss(cfg.model, out, target);
  };

  // The variants, each on its own copy of the model (same seed: same weights).
  std::vector<std::unique_ptr<VariantRun>> runs;
  for (const auto& name : cfg.variants) {
    auto run = std::make_unique<VariantRun>();
    run->name = name;
    VariantOptions vo;
    vo.group = pg;
    vo.accum = cfg.accum;
    vo.bucket_cap_mb = cfg.bucket_cap_mb;
    vo.timeline = &run->timeline;
    run->variant = make_variant(name, vo);
    run->variant->prepare(make_model(cfg.model));
    run->optimizer = std::make_unique<torch::optim::SGD>(run->variant->parameters(),
                                                         torch::optim::SGDOptions(cfg.lr));
    runs.push_back(std::move(run));
  }
  const auto& params0 = runs.front()->variant->parameters();
  int64_t elements = 0;
  for (const auto& p : params0) elements += p.numel();
  if (rank == 0) {
    std::fprintf(stderr,
                 "variants: %s: %zu parameter tensors, %lld elements (%.1f MiB of gradients); "
                 "%d ranks; accum %lld; %s\n",
                 describe(cfg.model).c_str(), params0.size(), static_cast<long long>(elements),
                 elements * 4 / 1048576.0, world, static_cast<long long>(cfg.accum),
                 machine_summary(torch_version).c_str());
  }

  at::Tensor one = torch::zeros({1});
  // One window: --accum micro-batches of `run`.
  auto run_window = [&](VariantRun& run, bool timed) {
    pg->allreduce(one)->wait();  // start together
    const auto w0 = Clock::now();
    const int64_t steps = run.variant->accumulation_steps();
    for (int64_t m = 0; m < cfg.accum; ++m) {
      if (timed) run.timeline.begin_iteration();
      const bool sync = (m + 1) % steps == 0;
      if (m % steps == 0) {
        const auto t0 = Clock::now();
        run.optimizer->zero_grad();
        run.timeline.add("compute", "zero_grad", t0, Clock::now());
      }
      run.variant->train_step(batches[m], loss_fn, sync);
      if (sync) {
        run.variant->finish_sync();
        const auto t0 = Clock::now();
        run.optimizer->step();
        run.timeline.add("compute", "step", t0, Clock::now());
      }
      if (timed) run.timeline.end_iteration();
    }
    if (timed) run.samples_ms.push_back(ms_between(w0, Clock::now()) / cfg.accum);
  };

  const int64_t windows = cfg.iters / cfg.accum;
  for (int64_t r = 0; r < cfg.warmup + cfg.rounds; ++r) {
    const bool timed = r >= cfg.warmup;
    std::vector<VariantRun*> order;
    for (auto& run : runs) order.push_back(run.get());
    if (r % 2) std::reverse(order.begin(), order.end());
    for (VariantRun* run : order) {
      for (int64_t w = 0; w < windows; ++w) run_window(*run, timed);
    }
    if (rank == 0) {
      std::string line;
      for (auto& run : runs) {
        if (timed) line += "  " + run->name + " " + format_fixed(run->samples_ms.back(), 1) + " ms";
      }
      std::fprintf(stderr, "variants: %s %lld/%lld done%s\n", timed ? "round" : "warm-up round",
                   static_cast<long long>(timed ? r - cfg.warmup + 1 : r + 1),
                   static_cast<long long>(timed ? cfg.rounds : cfg.warmup), line.c_str());
    }
  }

  // The slowest rank's samples.
  for (auto& run : runs) {
    at::Tensor t = torch::from_blob(run->samples_ms.data(),
                                    {static_cast<int64_t>(run->samples_ms.size())}, torch::kDouble);
    pg->allreduce(t, ddp::ReduceOp::MAX)->wait();
  }

  // Checks: the same parameters on every rank; the accumulating variants
  // against simple_ga.
  check_final_parameters(*pg, cfg.model, runs);

  pg->barrier()->wait();
  if (rank != 0) return 0;

  // --- report (rank 0) -------------------------------------------------------
  bool failed = false;
  std::vector<std::vector<std::string>> table;
  Json rows = Json::array();
  for (const auto& run : runs) {
    const Stats st = summarize(run->samples_ms);
    // Summation order may differ (ranks > 2): a real difference is a
    // visible fraction of how far training moved the parameters.
    const bool diff_bad = run->diff_vs_ref > 1e-3 * run->ref_scale;
    failed = failed || !run->ranks_agree || diff_bad;
    std::string diff_text = "–";
    if (run->diff_vs_ref >= 0) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2g", run->diff_vs_ref);
      diff_text = buf;
    }
    table.push_back({run->name, std::to_string(run->variant->accumulation_steps()),
                     format_fixed(st.median, 1),
                     format_fixed(st.min, 1) + "–" + format_fixed(st.max, 1),
                     run->ranks_agree ? "yes" : "NO", diff_text + (diff_bad ? " DIFFERS" : "")});
    Json row = Json::object();
    row.set("variant", run->name).set("accumulation_steps", run->variant->accumulation_steps());
    row.set("median_ms", st.median).set("min_ms", st.min).set("max_ms", st.max);
    Json samples = Json::array();
    for (double v : run->samples_ms) samples.push(v);
    row.set("samples_ms", std::move(samples));
    row.set("ranks_agree", run->ranks_agree).set("checksum_spread", run->checksum_spread);
    if (run->diff_vs_ref >= 0) {
      row.set("max_abs_diff_vs_simple_ga", run->diff_vs_ref);
      row.set("simple_ga_max_update", run->ref_scale);  // the scale it is judged against
    }
    row.set("timeline", Json::raw(run->timeline.trace_events()));
    rows.push(std::move(row));
  }

  std::printf(
      "variants: %s, %zu parameter tensors (%.1f MiB), %d ranks, accum %lld, bucket cap %s MiB; "
      "per micro-batch, slowest rank, %lld samples of %lld micro-batches; %s\n\n%s",
      describe(cfg.model).c_str(), params0.size(), elements * 4 / 1048576.0, world,
      static_cast<long long>(cfg.accum), format_fixed(cfg.bucket_cap_mb, 1).c_str(),
      static_cast<long long>(cfg.rounds * windows), static_cast<long long>(cfg.accum),
      machine_summary(torch_version).c_str(),
      markdown_table(
          {"variant", "accum", "median ms", "min–max ms", "ranks agree", "max abs Δ vs simple_ga"},
          table, {false, true, true, true, false, true})
          .c_str());
  std::printf("\nfinal parameters: %s\n",
              failed
                  ? "CHECK FAILED (a variant's parameters differ across ranks or from simple_ga's)"
                  : "every variant's agree across ranks (checksums equal); the accumulating "
                    "variants match simple_ga's");
  std::fflush(stdout);

  if (!cfg.json_path.empty()) {
    Json config = Json::object();
    config.set("model", cfg.model.name).set("model_description", describe(cfg.model));
    config.set("batch_per_rank", cfg.model.batch).set("image_size", cfg.model.image_size);
    config.set("seq_len", cfg.model.seq_len).set("seed", cfg.model.seed);
    config.set("parameter_tensors", static_cast<int64_t>(params0.size())).set("elements", elements);
    config.set("world_size", world).set("accum", cfg.accum).set("iters", cfg.iters);
    config.set("rounds", cfg.rounds).set("warmup", cfg.warmup);
    config.set("bucket_cap_mb", cfg.bucket_cap_mb).set("lr", cfg.lr);
    config.set("intra_op_threads", cfg.threads).set("openblas_threads", blas_threads);
    config.set("gloo_threads", cfg.gloo_threads);
    Json names = Json::array();
    for (const auto& n : cfg.variants) names.push(n);
    config.set("variants", std::move(names));
    config.set("method",
               "each variant its own model copy (same seed); a window = accum micro-batches after "
               "an untimed 1-element allreduce; rounds of iters micro-batches per variant, order "
               "reversed every other round, warmup rounds untimed; sample = window time / accum, "
               "slowest rank; rank 0's timeline of the timed micro-batches (bench/timeline.h)");
    Json out = Json::object();
    out.set("benchmark", "variants");
    add_machine_and_config(out, torch_version, std::move(config));
    out.set("rows", std::move(rows));
    out.set("parameters_check_passed", !failed);
    write_result("variants", cfg.json_path, out, /*indent=*/1);
  }
  return failed ? 1 : 0;
}

}  // namespace ddp_bench
