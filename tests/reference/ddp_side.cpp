// The ddp side of the cross-check against PyTorch's own DDP: reads the case
// pytorch_ddp.py wrote into DIR (manifest.txt, init.bin, x.bin, y.bin,
// branch.bin; see pytorch_ddp.py), trains it with ddp::DistributedDataParallel
// exactly as the Python side does with PyTorch's, and each rank writes
// ddp_rank<R>.bin: its parameters after every step, [steps, total], raw
// little-endian in the case's dtype. With a communication hook (manifest
// "hook": fp16, powersgd, batched_powersgd) it registers ddp's own, and each
// rank also writes ddp_grad_rank<R>.bin (the averaged gradients after every
// step) and rank 0 ddp_buckets.txt (the parameters of every bucket the hook
// saw), as the Python side does.
//
//   ddprun --nproc-per-node 2 ddp_side DIR
#include <ddp/ddp.h>

#include <torch/torch.h>

#include <atomic>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// The Python Net: 16 -> 32 -> 32 -> 4, a tanh branch beside the middle layer;
// registered in the same order, so parameters() match one to one.
struct NetImpl : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, branch{nullptr}, fc3{nullptr};
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(16, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 32));
    branch = register_module("branch", torch::nn::Linear(32, 32));
    fc3 = register_module("fc3", torch::nn::Linear(32, 4));
  }
  torch::Tensor forward(torch::Tensor x, int64_t use_branch) {
    auto h = torch::tanh(fc1(x));
    auto out = torch::tanh(fc2(h));
    if (use_branch) out = out + torch::tanh(branch(h));
    return fc3(out);
  }
};
TORCH_MODULE(Net);

struct Case {
  std::map<std::string, std::string> settings;
  std::vector<std::pair<std::string, std::vector<int64_t>>> params;
  at::ScalarType dtype = at::kDouble;
  int64_t world = 0, steps = 0, micro = 0, batch = 0, total = 0;

  const std::string& get(const std::string& key) const {
    auto it = settings.find(key);
    if (it == settings.end()) throw std::runtime_error("manifest.txt has no '" + key + "'");
    return it->second;
  }
  std::string get_or(const std::string& key, const std::string& otherwise) const {
    auto it = settings.find(key);
    return it == settings.end() ? otherwise : it->second;
  }
};

Case read_case(const std::string& dir) {
  std::ifstream in(dir + "/manifest.txt");
  if (!in) throw std::runtime_error("cannot read " + dir + "/manifest.txt");
  Case c;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string key;
    if (!(words >> key)) continue;
    if (key == "param") {
      std::string name;
      words >> name;
      std::vector<int64_t> shape;
      for (int64_t d; words >> d;) shape.push_back(d);
      int64_t n = 1;
      for (auto d : shape) n *= d;
      c.total += n;
      c.params.emplace_back(name, shape);
    } else {
      words >> c.settings[key];
    }
  }
  const auto& dtype = c.get("dtype");
  if (dtype == "float64")
    c.dtype = at::kDouble;
  else if (dtype == "float32")
    c.dtype = at::kFloat;
  else
    throw std::runtime_error("manifest.txt: unknown dtype " + dtype);
  c.world = std::stoll(c.get("world"));
  c.steps = std::stoll(c.get("steps"));
  c.micro = std::stoll(c.get("micro"));
  c.batch = std::stoll(c.get("batch"));
  return c;
}

torch::Tensor read_raw(const std::string& path, at::ScalarType dtype, std::vector<int64_t> shape) {
  auto t = torch::empty(shape, dtype);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("cannot read " + path);
  const auto bytes = static_cast<int64_t>(in.tellg());
  if (bytes != t.numel() * t.element_size()) {
    throw std::runtime_error(path + ": " + std::to_string(bytes) + " bytes, expected " +
                             std::to_string(t.numel() * t.element_size()));
  }
  in.seekg(0);
  in.read(static_cast<char*>(t.data_ptr()), bytes);  // little-endian, as this machine
  return t;
}

void write_raw(const std::string& path, const torch::Tensor& t) {
  auto c = t.contiguous();
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  if (!out) throw std::runtime_error("cannot write " + path);
}

torch::Tensor flat(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> parts;
  for (const auto& p : params) parts.push_back(p.detach().reshape(-1));
  return torch::cat(parts);
}

torch::Tensor flat_grads(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> parts;
  for (const auto& p : params) parts.push_back(p.grad().detach().reshape(-1));
  return torch::cat(parts);
}

// The lines of torch_buckets.txt / ddp_buckets.txt: "step S bucket I last L:
// NAME...", one per hook call. Written by the hook (communication thread),
// read after training.
struct BucketLog {
  std::map<const void*, std::string> names;  // parameter data -> name
  std::atomic<int64_t> step{0};
  std::vector<std::string> lines;

  void note(const ddp::GradBucket& bucket) {
    std::string line = "step " + std::to_string(step.load()) + " bucket " +
                       std::to_string(bucket.index()) + " last " +
                       std::to_string(bucket.is_last() ? 1 : 0) + ":";
    for (const auto& p : bucket.parameters()) {
      auto it = names.find(p.data_ptr());
      line += " " + (it == names.end() ? std::string("?") : it->second);
    }
    lines.push_back(line);
  }
};

// Registers the case's hook (ddp's own), logging every bucket it sees.
void register_hook(ddp::DistributedDataParallel& model, const Case& c,
                   const ddp::ProcessGroupPtr& pg, const std::shared_ptr<BucketLog>& log) {
  const std::string hook = c.get("hook");
  if (hook == "fp16") {
    model->register_comm_hook(pg, [log](const ddp::ProcessGroupPtr& group, ddp::GradBucket& b) {
      log->note(b);
      return ddp::fp16_compress_hook(group, b);
    });
    return;
  }
  if (hook != "powersgd" && hook != "batched_powersgd") {
    throw std::runtime_error("manifest.txt: unknown hook " + hook);
  }
  ddp::PowerSGDState state(pg, std::stoll(c.get("powersgd_rank")),
                           std::stoll(c.get("start_powerSGD_iter")),
                           /*min_compression_rate=*/2, /*use_error_feedback=*/true,
                           /*warm_start=*/true, /*orthogonalization_epsilon=*/0,
                           /*random_seed=*/0);
  const bool batched = hook == "batched_powersgd";
  model->register_comm_hook(
      std::move(state), [log, batched](ddp::PowerSGDState& s, ddp::GradBucket& b) {
        log->note(b);
        return batched ? ddp::batched_powerSGD_hook(s, b) : ddp::powerSGD_hook(s, b);
      });
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc != 2) {
      std::cerr << "usage: ddprun --nproc-per-node N ddp_side DIR\n";
      return 2;
    }
    const std::string dir = argv[1];
    torch::set_num_threads(1);
    const Case c = read_case(dir);
    auto pg = ddp::init_process_group(ddp::InitOptions().timeout(std::chrono::seconds(60)));
    const int64_t rank = pg->rank();
    if (pg->size() != c.world) {
      throw std::runtime_error("the case is for " + std::to_string(c.world) + " ranks, got " +
                               std::to_string(pg->size()));
    }

    Net net;
    net->to(c.dtype);
    {
      torch::NoGradGuard no_grad;
      auto init = read_raw(dir + "/init.bin", c.dtype, {c.total});
      auto named = net->named_parameters();
      if (named.size() != c.params.size()) throw std::runtime_error("parameter count differs");
      int64_t offset = 0;
      for (size_t i = 0; i < c.params.size(); ++i) {
        auto& p = named[i].value();
        if (named[i].key() != c.params[i].first || p.sizes() != c.params[i].second) {
          throw std::runtime_error("parameter #" + std::to_string(i) + ": manifest has '" +
                                   c.params[i].first + "', the model '" + named[i].key() + "'");
        }
        p.copy_(init.narrow(0, offset, p.numel()).view(p.sizes()));
        offset += p.numel();
      }
    }
    const double cap = std::stod(c.get("bucket_cap_mb"));
    ddp::DistributedDataParallel model(net,
                                       ddp::DistributedDataParallelOptions()
                                           .bucket_cap_mb(cap)
                                           .first_bucket_cap_mb(cap)
                                           .find_unused_parameters(c.get("find_unused") == "1"));
    const bool hooked = c.get_or("hook", "none") != "none";
    auto bucket_log = std::make_shared<BucketLog>();
    if (hooked) {
      for (const auto& named : net->named_parameters()) {
        bucket_log->names[named.value().data_ptr()] = named.key();
      }
      register_hook(model, c, pg, bucket_log);
    }
    torch::optim::SGD opt(
        model->parameters(),
        torch::optim::SGDOptions(std::stod(c.get("lr"))).momentum(std::stod(c.get("momentum"))));

    const auto x = read_raw(dir + "/x.bin", c.dtype, {c.steps, c.micro, c.world * c.batch, 16});
    const auto y = read_raw(dir + "/y.bin", c.dtype, {c.steps, c.micro, c.world * c.batch, 4});
    const auto branch = read_raw(dir + "/branch.bin", c.dtype, {c.steps, c.micro, c.world});
    std::vector<torch::Tensor> snapshots, gradients;
    for (int64_t step = 0; step < c.steps; ++step) {
      bucket_log->step = step;
      // Zero (not undefine) gradients, as PyTorch's zero_grad(set_to_none=False)
      // and libtorch 1.13's zero_grad() do (2.x's default undefines them).
      for (auto& p : model->parameters()) {
        if (p.grad().defined()) {
          p.mutable_grad().detach_();
          p.mutable_grad().zero_();
        }
      }
      for (int64_t m = 0; m < c.micro; ++m) {
        auto xb = x[step][m].narrow(0, rank * c.batch, c.batch);
        auto yb = y[step][m].narrow(0, rank * c.batch, c.batch);
        const int64_t use_branch = branch[step][m][rank].item<double>() != 0;
        auto pass = [&] { torch::mse_loss(model->forward(xb, use_branch), yb).backward(); };
        if (m + 1 < c.micro) {
          model->no_sync(pass);
        } else {
          pass();
        }
      }
      if (hooked) gradients.push_back(flat_grads(net->parameters()));
      opt.step();
      snapshots.push_back(flat(net->parameters()));
    }
    write_raw(dir + "/ddp_rank" + std::to_string(rank) + ".bin", torch::stack(snapshots));
    if (hooked) {
      write_raw(dir + "/ddp_grad_rank" + std::to_string(rank) + ".bin", torch::stack(gradients));
      if (rank == 0) {
        std::ofstream out(dir + "/ddp_buckets.txt");
        for (const auto& line : bucket_log->lines) out << line << "\n";
        if (!out) throw std::runtime_error("cannot write " + dir + "/ddp_buckets.txt");
      }
    }
    if (rank == 0) {
      std::cout << "ddp: " << c.world << " ranks, mode " << c.get("mode") << ", " << c.get("dtype")
                << ", " << c.steps << " steps: done; last iteration " << model->stats().summary()
                << "\n";
    }
    ddp::destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "ddp_side: " << e.what() << "\n";
    return 1;
  }
}
