// Built against an installed ddp (find_package(ddp)) and run by the
// installed ddprun: one DDP step of a linear model, gradients checked
// against the average every rank can compute.
#include <ddp/ddp.h>

#include <torch/torch.h>

#include <cstdio>

int main() {
  auto group = ddp::init_process_group();
  const int rank = group->rank(), size = group->size();
  torch::manual_seed(0);
  torch::nn::Linear net(3, 1);
  ddp::DistributedDataParallel model(net);
  // Rank r's input is all (r + 1): the averaged weight gradient of
  // sum(w.x + b) is the mean of (r + 1), i.e. (size + 1) / 2, in each entry.
  model->forward(torch::full({1, 3}, rank + 1.0)).sum().backward();
  const double want = (size + 1) / 2.0;
  const bool ok = torch::allclose(net->weight.grad(), torch::full({1, 3}, want));
  std::printf("rank %d/%d (%s): weight grad %s\n", rank, size, group->backend_name().c_str(),
              ok ? "ok" : "WRONG");
  ddp::destroy_process_group();
  return ok ? 0 : 1;
}
