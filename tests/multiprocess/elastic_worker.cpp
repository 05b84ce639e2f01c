// One member of an elastic job (tests/multiprocess/elastic_test.sh; the
// recovery times of docs/experiments/elastic.md): a float64 MLP on a fixed synthetic set, trained
// through ddp::ElasticRunner with ElasticSampler, SGD with momentum (or,
// with --zero, a ZeroRedundancyOptimizer wrapping it, sharded per generation).
//
//   elastic_worker --steps N [--batch B] [--step-ms MS] [--min M] [--max M]
//       [--fault kill|stop --victim ID[,ID] --at STEP[,STEP]]
//                                                   member ID kills (SIGKILL)
//                                                   or stops (SIGSTOP) itself
//                                                   mid-backward of step STEP
//       [--fault-point before-step]                 fault after backward, before
//                                                   opt.step() (others fail in
//                                                   ZeRO's broadcast, after
//                                                   their own update)
//       [--reform-victim ID]                        member ID kills itself as
//                                                   the first generation after
//                                                   a member left forms (after
//                                                   its state sync)
//       [--handover-victim ID]                      member ID kills itself in
//                                                   the ZeRO handover after the
//                                                   first --at step's failure:
//                                                   after the first member's
//                                                   turn to send, before the
//                                                   second's (a fault point)
//       [--save-at STEP --checkpoint PATH]          save a checkpoint after
//                                                   STEP steps and stop there
//       [--load PATH]                               start from that checkpoint
//       [--zero 1] [--commit-every K]               ZeRO; ElasticOptions::commit_every
//
// Lines it prints (rank 0 of each generation, unless said):
//   generation G: world W, members ..., resumed at step S
//   first step of generation G done at T ms (CLOCK_REALTIME), world W
//   victim: member ID faults at step S at T ms  (the victim)
//   final: steps N, world W, state fnv1a64 H   (parameters and momentum)
// An error ends it (exit 1): "elastic_worker: <error>", then its facts
// (support/error_facts.h).
#include <ddp/ddp.h>

#include "../support/error_facts.h"
#include "base/fault_point.h"
#include "compat/torch_compat.h"

#include <torch/torch.h>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

namespace {

int64_t realtime_ms() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

struct Flags {
  int64_t steps = 60, batch = 8, step_ms = 0, save_at = -1;
  int min = 1, max = 0, reform_victim = -1, handover_victim = -1, commit_every = 100;
  bool zero = false;
  std::vector<int64_t> victims, at;  // member victims[i] faults at step at[i]
  std::string fault, fault_point = "backward", checkpoint, load;
};

std::vector<int64_t> numbers(const std::string& list) {
  std::vector<int64_t> out;
  std::istringstream in(list);
  for (std::string n; std::getline(in, n, ',');) out.push_back(std::stoll(n));
  return out;
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--steps")
      f.steps = std::stoll(v);
    else if (k == "--batch")
      f.batch = std::stoll(v);
    else if (k == "--step-ms")
      f.step_ms = std::stoll(v);
    else if (k == "--min")
      f.min = std::stoi(v);
    else if (k == "--max")
      f.max = std::stoi(v);
    else if (k == "--fault")
      f.fault = v;
    else if (k == "--fault-point")
      f.fault_point = v;
    else if (k == "--victim")
      f.victims = numbers(v);
    else if (k == "--at")
      f.at = numbers(v);
    else if (k == "--reform-victim")
      f.reform_victim = std::stoi(v);
    else if (k == "--handover-victim")
      f.handover_victim = std::stoi(v);
    else if (k == "--save-at")
      f.save_at = std::stoll(v);
    else if (k == "--checkpoint")
      f.checkpoint = v;
    else if (k == "--load")
      f.load = v;
    else if (k == "--zero")
      f.zero = v == "1";
    else if (k == "--commit-every")
      f.commit_every = std::stoi(v);
    else
      throw std::invalid_argument("elastic_worker: unknown flag " + k);
  }
  if (f.victims.size() != f.at.size())
    throw std::invalid_argument("elastic_worker: one --at per --victim");
  return f;
}

uint64_t fnv1a(uint64_t h, const at::Tensor& t) {
  const auto c = t.detach().contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

// The same hash as a whole optimizer's below: parameters, then each
// momentum, broadcast from the rank owning it.
std::string zero_state_hash(torch::nn::Module& net, ddp::ZeroRedundancyOptimizer& zero,
                            ddp::ElasticStep& step) {
  const auto params = net.parameters();
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const auto& p : params) h = fnv1a(h, p);
  auto& local = zero.local_optimizer().state();
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor momentum = torch::empty_like(params[i]);
    if (zero.owner(i) == step.rank()) {
      const auto& s = local.at(ddp::compat::optimizer_state_key(local, params[i]));
      momentum.copy_(static_cast<torch::optim::SGDParamState&>(*s).momentum_buffer());
    }
    step.group()->broadcast(momentum, zero.owner(i))->wait();
    h = fnv1a(h, momentum);
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Flags f = parse(argc, argv);
    torch::manual_seed(7);
    const int64_t samples = 512;
    const auto inputs = torch::randn({samples, 32}, torch::kDouble);
    const auto targets = inputs.matmul(torch::randn({32, 10}, torch::kDouble)).argmax(1);
    auto net = torch::nn::Sequential(torch::nn::Linear(32, 64), torch::nn::ReLU(),
                                     torch::nn::Linear(64, 10));
    net->to(torch::kDouble);
    const auto sgd = torch::optim::SGDOptions(0.05).momentum(0.9);
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    ddp::ZeroRedundancyOptimizer* zero = nullptr;
    if (f.zero) {
      optimizer = std::make_unique<ddp::ZeroRedundancyOptimizer>(net->parameters(), sgd,
                                                                 ddp::ZeroOptions().elastic(true));
      zero = static_cast<ddp::ZeroRedundancyOptimizer*>(optimizer.get());
    } else {
      optimizer = std::make_unique<torch::optim::SGD>(net->parameters(), sgd);
    }
    torch::optim::Optimizer& opt = *optimizer;
    ddp::ElasticState state(net, opt);
    ddp::ElasticSampler sampler(samples, f.batch, /*shuffle=*/true, /*seed=*/3);

    const long id = std::getenv("RANK") ? std::atol(std::getenv("RANK")) : -1;
    ddp::ElasticOptions options;
    options.min_world_size(f.min).max_world_size(f.max).commit_every(f.commit_every);
    std::string zero_final;  // with --zero: the final line, made by a collective in the last step
    bool first_of_generation = false, loaded = f.load.empty();
    ddp::ElasticRunner runner(options);
    runner.on_world_change([&](const ddp::ElasticWorld&, const ddp::ElasticWorld& now) {
      first_of_generation = true;
      // Not "generation 1": on a loaded machine a generation whose group did
      // not connect is formed again, with the same members, before it.
      if (f.reform_victim >= 0 && id == f.reform_victim && !now.left.empty()) std::raise(SIGKILL);
      if (now.rank == 0) {
        std::printf(
            "generation %lld: world %d, members %s, resumed at step %lld\n",
            static_cast<long long>(now.generation), now.world_size,
            [&] {
              std::string s;
              for (int m : now.members) s += (s.empty() ? "" : ",") + std::to_string(m);
              return s;
            }()
                .c_str(),
            static_cast<long long>(state.training.iteration));
        std::fflush(stdout);
      }
    });
    const ddp::ElasticWorld last = runner.run(state, [&](ddp::ElasticStep& step) {
      if (!loaded) {  // the checkpoint-handover reference: every member loads rank 0's file
        auto resumed = ddp::load_checkpoint(
            f.load, *net, opt,
            ddp::CheckpointOptions().process_group(step.group()).rng_state(false));
        if (!resumed) throw std::runtime_error("no checkpoint at " + f.load);
        state.training = *resumed;
        state.commit(/*full=*/true);  // so that no later failure goes back past the load
        loaded = true;
        return true;
      }
      if (state.training.iteration >= f.steps) {
        if (zero) zero_final = zero_state_hash(*net, *zero, step);
        return false;
      }
      if (f.save_at >= 0 && state.training.iteration == f.save_at) {
        if (zero) zero->consolidate_state_dict(0);
        ddp::save_checkpoint(f.checkpoint, *net, opt, state.training,
                             ddp::CheckpointOptions().process_group(step.group()).rng_state(false));
        return false;
      }
      auto indices = sampler.indices(state.training, step.rank(), step.world_size());
      if (indices.empty()) {
        sampler.next_epoch(state.training);
        return true;
      }
      if (id == f.handover_victim && !f.at.empty() && state.training.iteration == f.at[0]) {
        // The next handover is the one after this step's failure.
        ddp::detail::arm_fault_point("elastic.zero_handover.transfer", 2);
      }
      const auto index = torch::tensor(indices, torch::kLong);
      opt.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(
          step.model()->forward(inputs.index_select(0, index)), targets.index_select(0, index));
      int64_t fault_at = -1;
      for (size_t v = 0; v < f.victims.size(); ++v) {
        if (f.victims[v] == id) fault_at = f.at[v];
      }
      auto fault = [&f, id, fault_at] {
        std::printf("victim: member %ld faults at step %lld at %lld ms\n", id,
                    static_cast<long long>(fault_at), static_cast<long long>(realtime_ms()));
        std::fflush(stdout);
        std::raise(f.fault == "stop" ? SIGSTOP : SIGKILL);
      };
      const bool faulting = state.training.iteration == fault_at;
      if (faulting && f.fault_point == "backward") {
        // Mid-backward: when the last layer's gradient is ready, before the
        // first layer's (so some buckets are reduced, some not).
        // One fault per step named (a stopped victim that goes on does not
        // fault again).
        auto fired = std::make_shared<bool>(false);
        net[2]->as<torch::nn::Linear>()->weight.register_hook([fault, fired](const at::Tensor& g) {
          if (!*fired) fault();
          *fired = true;
          return g;
        });
      }
      loss.backward();
      if (faulting && f.fault_point == "before-step") fault();
      opt.step();
      sampler.advance(state.training, step.world_size());
      if (f.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(f.step_ms));
      if (first_of_generation && step.rank() == 0) {
        std::printf("first step of generation %lld done at %lld ms, world %d\n",
                    static_cast<long long>(step.world().generation),
                    static_cast<long long>(realtime_ms()), step.world_size());
        std::fflush(stdout);
      }
      first_of_generation = false;
      return true;
    });
    if (last.rank == 0 && zero) {
      std::printf("final: steps %lld, world %d, state fnv1a64 %s\n",
                  static_cast<long long>(state.training.iteration), last.world_size,
                  zero_final.c_str());
    } else if (last.rank == 0) {
      uint64_t h = 0xcbf29ce484222325ULL;
      for (const auto& p : net->parameters()) h = fnv1a(h, p);
      for (const auto& p : net->parameters()) {
        const auto& s = opt.state().at(ddp::compat::optimizer_state_key(opt.state(), p));
        h = fnv1a(h, static_cast<torch::optim::SGDParamState&>(*s).momentum_buffer());
      }
      std::printf("final: steps %lld, world %d, state fnv1a64 %016llx\n",
                  static_cast<long long>(state.training.iteration), last.world_size,
                  static_cast<unsigned long long>(h));
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "elastic_worker: " << e.what() << "\n";
    ddp::testing::print_error_facts(std::cerr, e);
    return 1;
  }
}
