// The Reducer's multirank tests' model and instruments (reducer_test.cpp,
// reducer_errors_test.cpp).
//
// The model is a chain of three double parameters of distinct sizes, so a
// bucket's allreduce names its parameter by element count:
//   y = x * w0 (3)  ->  z = sum(y) * w1 (5)  ->  u = sum(z) * w2 (7),  loss = sum(u)
// Backward produces w2's gradient first, then w1's, then w0's.
#pragma once

#include "spawn.h"

#include <ddp/ddp.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace ddp::testing {

using Events = std::vector<std::string>;

// What happened on one rank, in order, from the autograd thread and the
// collectives' callers.
class Log {
 public:
  void add(std::string event) {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(event));
  }
  Events take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(events_, {});
  }

 private:
  std::mutex mutex_;
  Events events_;  // guarded by mutex_
};

// A real group that logs each allreduce as its caller issues it.
class RecordingGroup : public ProcessGroup {
 public:
  RecordingGroup(ProcessGroupPtr inner, Log* log)
      : ProcessGroup(inner->rank(), inner->size(), inner->timeout()), inner_(inner), log_(log) {}
  std::string backend_name() const override { return "recording"; }

 protected:
  WorkPtr do_allreduce(at::Tensor t, ReduceOp op) override {
    log_->add("allreduce " + std::to_string(t.numel()));
    return inner_->allreduce(t, op);
  }
  WorkPtr do_allreduce_coalesced(std::vector<at::Tensor> ts, ReduceOp op) override {
    return inner_->allreduce_coalesced(std::move(ts), op);
  }
  WorkPtr do_broadcast(at::Tensor t, int root) override {
    log_->add("broadcast " + std::to_string(t.numel()));
    return inner_->broadcast(t, root);
  }
  WorkPtr do_allgather(std::vector<at::Tensor> outs, at::Tensor in) override {
    return inner_->allgather(std::move(outs), in);
  }
  WorkPtr do_reduce_scatter(at::Tensor out, std::vector<at::Tensor> ins, ReduceOp op) override {
    return inner_->reduce_scatter(out, std::move(ins), op);
  }
  WorkPtr do_barrier() override { return inner_->barrier(); }

 private:
  ProcessGroupPtr inner_;
  Log* log_;
};

struct Chain {
  std::vector<at::Tensor> params;  // w0, w1, w2
  std::vector<std::string> names{"w0", "w1", "w2"};

  explicit Chain(Log* log = nullptr) {
    for (int64_t n : {3, 5, 7}) {
      params.push_back(at::linspace(0.1, 0.1 * n, n, at::kDouble).requires_grad_());
    }
    if (log) {
      for (size_t i = 0; i < params.size(); ++i) {
        params[i].register_hook(
            [log, name = names[i]](const at::Tensor&) { log->add("grad " + name); });
      }
    }
  }
  // Drops every parameter's gradient: the next backward writes it afresh.
  void clear_grads() {
    for (auto& p : params) p.mutable_grad() = at::Tensor();
  }
  // This rank's input: different on every rank and in every step.
  static at::Tensor input(int rank, int step) {
    return at::arange(1, 4, at::kDouble) * (rank + 1) + step;
  }
  // `skip` leaves that parameter out of the graph (a constant instead).
  at::Tensor forward(const at::Tensor& x, int skip = -1) const {
    auto w = [&](int i) { return i == skip ? params[i].detach() : params[i]; };
    at::Tensor y = x * w(0);
    at::Tensor z = y.sum() * w(1);
    return z.sum() * w(2);
  }
};

// One pass through `reducer`: this rank's forward for `step` with parameter
// `skip` left out of the graph (-1: none), prepare_for_backward, backward.
inline void backward_step(Reducer& reducer, const Chain& chain, int rank, int step, int skip = -1,
                          bool synchronize = true) {
  at::Tensor out = chain.forward(Chain::input(rank, step), skip);
  reducer.prepare_for_backward({out}, synchronize);
  out.sum().backward();
}

// Each rank's local gradients for `steps` (accumulated), averaged over ranks:
// what a synchronized backward must leave in every rank's .grad.
inline std::vector<at::Tensor> expected_average(int size, const std::vector<int>& steps,
                                                int skip_on_rank1 = -1) {
  std::vector<at::Tensor> sum;
  for (int r = 0; r < size; ++r) {
    Chain local;
    for (int step : steps) {
      local.forward(Chain::input(r, step), r == 1 ? skip_on_rank1 : -1).sum().backward();
    }
    for (size_t i = 0; i < local.params.size(); ++i) {
      at::Tensor g = local.params[i].grad().defined() ? local.params[i].grad()
                                                      : at::zeros_like(local.params[i]);
      if (sum.size() <= i)
        sum.push_back(g.clone());
      else
        sum[i] += g;
    }
  }
  for (auto& s : sum) s /= size;
  return sum;
}

inline void expect_grads(const Chain& chain, const std::vector<at::Tensor>& expected, int rank) {
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_TRUE(chain.params[i].grad().defined()) << "rank " << rank << " " << chain.names[i];
    EXPECT_TRUE(at::allclose(chain.params[i].grad(), expected[i], 1e-13, 1e-13))
        << "rank " << rank << " " << chain.names[i] << ": " << chain.params[i].grad()
        << " expected " << expected[i];
  }
}

// One bucket per parameter.
inline ReducerOptions one_per_bucket() {
  return ReducerOptions().bucket_cap_bytes(1).first_bucket_cap_bytes(1);
}

// The end-of-backward status allreduce (iteration_agreement.h): any allreduce
// whose size is none of the parameters' (3, 5, 7, and 2 for a spare one).
inline bool is_status(const std::string& e) {
  if (e.rfind("allreduce ", 0) != 0) return false;
  const std::string n = e.substr(10);
  return n != "2" && n != "3" && n != "5" && n != "7";
}

inline Events without_status(Events events) {
  events.erase(std::remove_if(events.begin(), events.end(), is_status), events.end());
  return events;
}
}  // namespace ddp::testing
