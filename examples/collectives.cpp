// Every collective of ddp's process group on real ranks, each result checked.
// Until the DDP module lands this is the README's main job:
//
//   ddprun --nproc-per-node 2 build/examples/collectives
//
// Also runs under torchrun --no_python and mpirun (ddp reads their
// variables). Flags: --init-method URL (default env://), --rank R and
// --world-size N (for tcp:// and file://), --threads T (the gloo backend's
// worker threads), --round-robin K.
#include <ddp/ddp.h>

#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

namespace {

void check(bool ok, const std::string& what, int rank) {
  if (!ok) throw std::runtime_error("rank " + std::to_string(rank) + ": wrong result: " + what);
}

ddp::InitOptions parse(int argc, char** argv) {
  ddp::InitOptions o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--init-method")
      o.init_method(value);
    else if (flag == "--rank")
      o.rank(std::stoi(value));
    else if (flag == "--world-size")
      o.world_size(std::stoi(value));
    else if (flag == "--threads")
      o.backend_options(
          std::make_shared<ddp::GlooOptions>(ddp::GlooOptions().threads(std::stoi(value))));
    else if (flag == "--round-robin")
      o.round_robin_groups(std::stoi(value));
    else
      throw ddp::InvalidArgument("collectives: unknown flag " + flag);
  }
  if (argc % 2 == 0) throw ddp::InvalidArgument("collectives: flag without value");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    auto start = std::chrono::steady_clock::now();
    auto pg = ddp::init_process_group(parse(argc, argv));
    const int rank = pg->rank(), n = pg->size();
    const int64_t elements = 1 << 20;

    at::Tensor sum = torch::full({elements}, rank + 1.0f);
    auto w1 = pg->allreduce(sum);  // in flight together
    at::Tensor avg = torch::full({elements}, rank * 2.0, at::kDouble);
    auto w2 = pg->allreduce(avg, ddp::ReduceOp::AVG);
    w1->wait();
    w2->wait();
    check(torch::all(sum == n * (n + 1) / 2.0f).item<bool>(), "allreduce SUM", rank);
    check(torch::allclose(avg, torch::full({elements}, n - 1.0, at::kDouble)), "allreduce AVG",
          rank);

    at::Tensor b = torch::full({1000}, rank, at::kLong);
    pg->broadcast(b, n - 1)->wait();
    check(torch::all(b == n - 1).item<bool>(), "broadcast", rank);

    std::vector<at::Tensor> gathered;
    for (int r = 0; r < n; ++r) gathered.push_back(torch::empty({3}, at::kInt));
    pg->allgather(gathered, torch::full({3}, rank, at::kInt))->wait();
    for (int r = 0; r < n; ++r) check(torch::all(gathered[r] == r).item<bool>(), "allgather", rank);

    std::vector<at::Tensor> chunks;
    for (int r = 0; r < n; ++r) chunks.push_back(torch::full({5}, r * 10.0f + rank));
    at::Tensor mine = torch::empty({5});
    pg->reduce_scatter(mine, chunks)->wait();
    check(torch::all(mine == rank * 10.0f * n + n * (n - 1) / 2.0f).item<bool>(), "reduce_scatter",
          rank);

    pg->barrier()->wait();
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
    std::cout << "rank " << rank << " of " << n << " [" << pg->backend_name()
              << "]: allreduce (SUM, AVG), broadcast, allgather, reduce_scatter, barrier: "
                 "all correct ("
              << ms << " ms)" << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << e.what() << std::endl;
    return 1;
  }
}
