// examples/train's command line: the flags, their defaults and --help.
#pragma once

#include "fashion_mnist.h"

#include <ddp/bucket_cap.h>
#include <ddp/distributed_data_parallel.h>

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace train {

inline const char* const kUsage =
    "usage: ddprun --nproc-per-node N train [flags]\n"
    "  --epochs E          passes over the training data (default 4)\n"
    "  --batch-size B      samples per rank per step (default 64)\n"
    "  --lr LR             SGD learning rate, momentum 0.9 (default 0.01)\n"
    "  --log-every N       progress line every N steps on rank 0 (default 50)\n"
    "  --checkpoint PATH   where rank 0 saves the trained module at the end: a plain\n"
    "                      module, torch::load reads it into a Net (default: none;\n"
    "                      the job writes no file unless asked)\n"
    "  --checkpoint-every N  every N steps, rank 0 saves a snapshot of the whole\n"
    "                      training state (module, optimizer, epoch, step, sampler\n"
    "                      position, every rank's RNG) to --snapshot, atomically,\n"
    "                      and once more when training ends; at start the job\n"
    "                      resumes from that snapshot when it exists (a finished\n"
    "                      one: straight to the evaluation). 0: no snapshots,\n"
    "                      none read (default 0)\n"
    "  --snapshot PATH     the snapshot file of --checkpoint-every (default\n"
    "                      train_snapshot.ckpt); only rank 0's disk needs it\n"
    "  --bucket-cap-mb MB  DDP bucket size, or auto (bucket autotuning; default\n"
    "                      $DDP_BUCKET_CAP_MB, else 25; the first bucket is\n"
    "                      min(1, MB))\n"
    "  --find-unused       DDP find_unused_parameters(true)\n"
    "  --compress LEVELS   reduce gradients through ddp::adaptive_compression_hook:\n"
    "                      LEVELS is a comma-separated ladder from the most precise\n"
    "                      level to the most compressed (full, fp16, bf16,\n"
    "                      powersgd:R), one level is fixed compression, 'adaptive'\n"
    "                      the hook's default ladder; rank 0 prints the bytes sent\n"
    "                      and the levels used (default: no hook). Snapshots of\n"
    "                      --checkpoint-every do not hold the hook's state: a\n"
    "                      resumed job starts the ladder again\n"
    "  --compress-window N iterations per window of --compress (default 50)\n"
    "  --zero              shard SGD's momentum across ranks (ddp::ZeroRedundancyOptimizer;\n"
    "                      with --elastic, ZeroOptions().elastic(true): each rank also\n"
    "                      keeps a replica of the next rank's shard)\n"
    "  --elastic           train through ddp::ElasticRunner: ranks may die or join\n"
    "                      (run under ddprun --elastic MIN:MAX, or ddp-chaos); not\n"
    "                      with --uneven or --checkpoint-every\n"
    "  --commit-every N    with --elastic, a full copy of the state every N steps\n"
    "                      (ElasticOptions::commit_every; default 100). With --zero, a\n"
    "                      failure inside ZeRO's parameter broadcast (after opt.step())\n"
    "                      goes back to the last full copy: 1 loses no step\n"
    "  --report-state      with --elastic, every rank prints its member id, step and\n"
    "                      parameters' fnv1a64 after each formation and at the end\n"
    "                      (what ddp-chaos checks)\n"
    "  --uneven            rank r trains on (100 - 10 r)% of its shard each epoch (at\n"
    "                      least half): a ddp::Join keeps the ranks that finished\n"
    "                      answering the others' collectives\n"
    "  --data NAME         fashion-mnist: Fashion-MNIST (Debian's dataset-fashion-mnist)\n"
    "                      with a small CNN, or synthetic data where the package is\n"
    "                      absent; synthetic: a synthetic 10-class set with an MLP\n"
    "                      (default fashion-mnist)\n"
    "  --data-dir DIR      where the Fashion-MNIST .gz files are (default\n"
    "                      /usr/share/datasets/fashion-mnist); unzipped once into\n"
    "                      $XDG_CACHE_HOME/ddp/fashion-mnist (else ~/.cache/...)\n"
    "  --mnist DIR         train an MLP on MNIST from DIR (the four unzipped files)\n"
    "  --train-size N      synthetic training samples (default 40000)\n"
    "  --dropout P         dropout after each hidden layer (default 0); each rank\n"
    "                      draws its masks from its own seed\n"
    "  --float64           train in float64 instead of float32\n"
    "  --mixed-precision P[,R]  compute in P (bf16 or fp16), reduce gradients in R\n"
    "                      (bf16, fp16 or fp32; default P); parameters, the optimizer\n"
    "                      and checkpoints stay in float32 (DDP's mixed_precision)\n"
    "  --seed S            the seed of the model's initial parameters (default 1)\n"
    "  --threads T         intra-op threads per rank (default 1)\n"
    "  --device D          cpu, cuda or auto: auto trains on the GPUs where libtorch\n"
    "                      sees any (a GPU per rank over nccl where there are enough,\n"
    "                      else ranks sharing them over shm, which stages CUDA\n"
    "                      tensors through host memory), else on the CPU; cuda\n"
    "                      without a GPU is an error. $DDP_BACKEND, when set, is the\n"
    "                      backend. The job prints what it chose and why (default auto)\n"
    "  --timeout S         seconds a collective may wait for the other ranks before\n"
    "                      the job fails (default 30 minutes; $DDP_TIMEOUT, read\n"
    "                      by init_process_group, takes precedence)\n"
    "  -h, --help          print this text\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Flags {
  int epochs = 4;
  int64_t batch_size = 64;
  double lr = 0.01;
  int64_t log_every = 50;
  std::string checkpoint;  // empty: the trained module is not saved
  int64_t checkpoint_every = 0;  // 0: no snapshots
  std::string snapshot = "train_snapshot.ckpt";
  int64_t train_size = 40000;
  double dropout = 0;
  bool float64 = false;
  std::string mixed_precision;  // empty: none; else "P" or "P,R"
  int64_t seed = 1;
  ddp::BucketCapMb bucket_cap_mb;  // a size in MiB or auto
  bool find_unused = false;
  std::string compress;         // empty: no communication hook
  int64_t compress_window = 50;
  bool zero = false;
  bool uneven = false;
  bool elastic = false;
  bool report_state = false;
  int commit_every = 0;  // 0: ElasticOptions' default
  std::string data = "fashion-mnist";
  std::string data_dir = kFashionMnistDir;
  std::string mnist;
  int threads = 1;
  std::string device = "auto";  // cpu, cuda or auto (train_device.h)
  int timeout_s = 0;  // 0: the default
  bool help = false;
};

template <typename T>
T number(const std::string& flag, const std::string& text, T min) {
  size_t used = 0;
  T value{};
  try {
    if constexpr (std::is_floating_point_v<T>) {
      value = static_cast<T>(std::stod(text, &used));
    } else {
      value = static_cast<T>(std::stoll(text, &used));
    }
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || value < min) {
    std::ostringstream message;
    message << flag << " expects a number >= " << min << ", got '" << text << "'";
    throw UsageError(message.str());
  }
  return value;
}

// --mixed-precision's "P" or "P,R" as DDP's option.
inline ddp::MixedPrecision mixed_precision_of(const std::string& text) {
  auto dtype = [&](const std::string& name, bool compute) {
    if (name == "bf16") return torch::kBFloat16;
    if (name == "fp16") return torch::kHalf;
    if (name == "fp32" && !compute) return torch::kFloat;
    throw UsageError("--mixed-precision: '" + name + "' is not " +
                     (compute ? "bf16 or fp16" : "bf16, fp16 or fp32") + " (in '" + text + "')");
  };
  const auto comma = text.find(',');
  ddp::MixedPrecision mp;
  mp.param_dtype = dtype(text.substr(0, comma), /*compute=*/true);
  if (comma != std::string::npos) mp.reduce_dtype = dtype(text.substr(comma + 1), false);
  return mp;
}

// --compress's levels, in order ("" -> none).
inline std::vector<std::string> compression_ladder(const std::string& text) {
  std::vector<std::string> levels;
  std::stringstream in(text);
  for (std::string level; std::getline(in, level, ',');) levels.push_back(level);
  return levels;
}

inline Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    bool inline_value = false;
    if (auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inline_value = true;
    }
    auto next = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= argc) throw UsageError(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "-h" || flag == "--help")
      f.help = true;
    else if (flag == "--epochs")
      f.epochs = number<int>(flag, next(), 1);
    else if (flag == "--batch-size")
      f.batch_size = number<int64_t>(flag, next(), 1);
    else if (flag == "--lr")
      f.lr = number<double>(flag, next(), 0);
    else if (flag == "--log-every")
      f.log_every = number<int64_t>(flag, next(), 1);
    else if (flag == "--checkpoint")
      f.checkpoint = next();
    else if (flag == "--checkpoint-every")
      f.checkpoint_every = number<int64_t>(flag, next(), 0);
    else if (flag == "--snapshot")
      f.snapshot = next();
    else if (flag == "--train-size")
      f.train_size = number<int64_t>(flag, next(), 1);
    else if (flag == "--dropout")
      f.dropout = number<double>(flag, next(), 0);
    else if (flag == "--float64")
      f.float64 = true;
    else if (flag == "--mixed-precision")
      f.mixed_precision = next();
    else if (flag == "--seed")
      f.seed = number<int64_t>(flag, next(), 0);
    else if (flag == "--bucket-cap-mb") {
      const std::string text = next();
      f.bucket_cap_mb =
          text == "auto" ? ddp::BucketCapMb(text) : ddp::BucketCapMb(number<double>(flag, text, 0));
    }
    else if (flag == "--find-unused")
      f.find_unused = true;
    else if (flag == "--compress") {
      f.compress = next();
      if (f.compress.empty()) throw UsageError("--compress needs levels, e.g. 'adaptive'");
    }
    else if (flag == "--compress-window")
      f.compress_window = number<int64_t>(flag, next(), 1);
    else if (flag == "--zero")
      f.zero = true;
    else if (flag == "--uneven")
      f.uneven = true;
    else if (flag == "--elastic")
      f.elastic = true;
    else if (flag == "--report-state")
      f.report_state = true;
    else if (flag == "--commit-every")
      f.commit_every = number<int>(flag, next(), 1);
    else if (flag == "--data")
      f.data = next();
    else if (flag == "--data-dir")
      f.data_dir = next();
    else if (flag == "--mnist")
      f.mnist = next();
    else if (flag == "--device")
      f.device = next();
    else if (flag == "--threads")
      f.threads = number<int>(flag, next(), 1);
    else if (flag == "--timeout")
      f.timeout_s = number<int>(flag, next(), 1);
    else
      throw UsageError("unknown flag '" + flag + "'");
    if (inline_value && (flag == "--find-unused" || flag == "--float64" || flag == "--zero" ||
                         flag == "--uneven" || flag == "--elastic" || flag == "--report-state" ||
                         flag == "--help")) {
      throw UsageError(flag + " takes no value");
    }
  }
  if (f.data != "fashion-mnist" && f.data != "synthetic") {
    throw UsageError("--data expects fashion-mnist or synthetic, got '" + f.data + "'");
  }
  if (f.device != "cpu" && f.device != "cuda" && f.device != "auto") {
    throw UsageError("--device expects cpu, cuda or auto, got '" + f.device + "'");
  }
  if (f.dropout >= 1) throw UsageError("--dropout expects a probability below 1");
  if (!f.mixed_precision.empty()) {
    mixed_precision_of(f.mixed_precision);  // a UsageError if it does not parse
    if (f.float64) throw UsageError("--mixed-precision does not go with --float64");
  }
  for (const auto& level : compression_ladder(f.compress)) {
    if (level == "full" || level == "fp16" || level == "bf16") continue;
    if (level == "adaptive" && f.compress == "adaptive") continue;
    if (level.rfind("powersgd:", 0) == 0) {
      number<int64_t>("--compress powersgd:R", level.substr(9), 1);
      continue;
    }
    throw UsageError("--compress: '" + level +
                     "' is not a level (full, fp16, bf16, powersgd:R) nor 'adaptive' alone");
  }
  if (f.elastic && !f.compress.empty()) {
    throw UsageError("--compress does not go with --elastic (the elastic runner builds DDP itself)");
  }
  if (f.zero && f.checkpoint_every > 0) {
    throw UsageError(
        "--zero with --checkpoint-every: a snapshot needs the optimizer's whole "
        "state (ZeroRedundancyOptimizer::consolidate_state_dict); use one of them");
  }
  if (f.elastic && (f.uneven || f.checkpoint_every > 0)) {
    throw UsageError(
        "--elastic does not go with --uneven or --checkpoint-every: the elastic runner "
        "keeps the state in memory and re-forms the ranks itself");
  }
  if ((f.report_state || f.commit_every > 0) && !f.elastic) {
    throw UsageError("--report-state and --commit-every go with --elastic");
  }
  if (f.uneven && f.checkpoint_every > 0) {
    throw UsageError(
        "--uneven does not go with --checkpoint-every: ranks that finished the epoch "
        "write no snapshot inside the Join");
  }
  return f;
}

}  // namespace train
