// Staging through a stager (src/collectives/staging.h), behind its seam:
// CPU tensors staged by a stager of the test's that copies them later, on a
// thread of its own, as a GPU's copy engine copies CUDA tensors to pinned
// memory. The caller's thread returns before any copy; the backend's worker
// waits for the input copies, never for the copies back; Works complete in
// issue order; late and failed copies are the Work's error; DDP trains over
// it bit for bit as without it; a failed copy breaks the group.
#include "shm_fixtures.h"
#include "spawn.h"
#include "support/raised.h"

#include "collectives/stager.h"

#include <ddp/backends/gloo.h>
#include <ddp/backends/shm.h>
#include <ddp/ddp.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

namespace ddp::testing {
namespace {

using std::chrono::milliseconds;

// Copies of CPU tensors made later, in order, on a thread of their own. A
// held direction copies nothing until released; otherwise each batch waits
// 0-300 µs first, so that a reader that does not wait for its fence reads
// what was there before: NaN, from to_host().
class LaterCopies : public detail::Stager {
 public:
  LaterCopies() : thread_([this] { loop(); }) {}
  ~LaterCopies() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  std::vector<at::Tensor> to_host(const std::vector<at::Tensor>& tensors, bool copy,
                                  detail::Fence* copied) override {
    std::vector<at::Tensor> host;
    for (const at::Tensor& t : tensors) {
      host.push_back(t.is_floating_point() ? at::full_like(t, NAN) : at::full_like(t, -7));
    }
    *copied = copy ? submit(tensors, host, /*to_host=*/true) : [] { return true; };
    return host;
  }

  detail::Fence to_device(const std::vector<at::Tensor>& results,
                          const std::vector<at::Tensor>& originals) override {
    ++to_device_calls_;
    return submit(results, originals, /*to_host=*/false);
  }

  void hold(bool to_host, bool to_device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      hold_to_host_ = to_host;
      hold_to_device_ = to_device;
    }
    cv_.notify_all();
  }
  // The fences of later copies in that direction throw.
  void fail(bool to_host) { (to_host ? fail_to_host_ : fail_to_device_) = true; }
  int to_device_calls() const { return to_device_calls_; }

 private:
  struct Batch {
    std::vector<at::Tensor> from, to;
    bool to_host;
    std::atomic<bool> done{false};
  };

  detail::Fence submit(std::vector<at::Tensor> from, std::vector<at::Tensor> to, bool to_host) {
    auto batch = std::make_shared<Batch>();
    batch->from = std::move(from);
    batch->to = std::move(to);
    batch->to_host = to_host;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      (to_host ? to_host_ : to_device_).push_back(batch);
    }
    cv_.notify_all();
    const bool fail = to_host ? fail_to_host_.load() : fail_to_device_.load();
    return [batch, fail] {
      if (fail) throw std::runtime_error("copy engine fault (injected)");
      return batch->done.load();
    };
  }

  void loop() {
    std::mt19937 random(11);
    for (;;) {
      std::shared_ptr<Batch> batch;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] {
          return stop_ || (!hold_to_host_ && !to_host_.empty()) ||
                 (!hold_to_device_ && !to_device_.empty());
        });
        if (stop_) return;
        auto& from = !hold_to_host_ && !to_host_.empty() ? to_host_ : to_device_;
        batch = from.front();
        from.pop_front();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(random() % 300));
      for (size_t i = 0; i < batch->to.size(); ++i) batch->to[i].copy_(batch->from[i]);
      batch->done = true;
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Batch>> to_host_, to_device_;
  bool hold_to_host_ = false, hold_to_device_ = false, stop_ = false;
  std::atomic<bool> fail_to_host_{false}, fail_to_device_{false};
  std::atomic<int> to_device_calls_{0};
  std::thread thread_;  // last: started once the rest is
};

// shm that stages every CPU tensor, as it stages CUDA ones.
class StagingShm : public ShmProcessGroup {
 public:
  using ShmProcessGroup::ShmProcessGroup;
  bool handles_device(c10::DeviceType) const override { return false; }
};

// gloo, likewise (its module's queue takes the gate from libddp's thread).
class StagingGloo : public GlooProcessGroup {
 public:
  using GlooProcessGroup::GlooProcessGroup;
  bool handles_device(c10::DeviceType) const override { return false; }
};

ProcessGroupPtr staging_group(StorePtr store, int rank, int size,
                              milliseconds timeout = std::chrono::seconds(20)) {
  return std::make_shared<StagingShm>(std::move(store), rank, size, tiny().timeout(timeout));
}

// Polls `done` for up to 20 s.
bool eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

// Two ranks of `make_group` allreduce while no input copy can finish: the
// call returns at once, and the result is the copied values' sum once the
// copies are let through.
void expect_the_worker_to_wait_for_the_copy(
    const std::function<ProcessGroupPtr(StorePtr, int)>& make_group) {
  LaterCopies copies;
  detail::StagerForTesting put_in(c10::DeviceType::CPU, &copies);
  copies.hold(/*to_host=*/true, /*to_device=*/false);
  std::atomic<int> issued{0};
  spawn(2, [&](int rank, StorePtr store) {
    ProcessGroupPtr pg = make_group(store, rank);
    at::Tensor t = at::full({5000}, rank + 1.0);
    // Returns although no input copy can finish (else: a timeout, 20 s on).
    WorkPtr work = pg->allreduce(t);
    EXPECT_FALSE(work->is_completed()) << "completed before its input was copied";
    ++issued;  // then rank 0 releases the copies
    if (rank == 0) {
      ASSERT_TRUE(eventually([&] { return issued == 2; }));
      std::this_thread::sleep_for(milliseconds(50));
      EXPECT_FALSE(work->is_completed());
      copies.hold(false, false);
    }
    work->wait();
    // NaN had the worker read the staged tensor before its copy landed.
    EXPECT_TRUE(at::all(t == 3.0).item<bool>()) << t.slice(0, 0, 4);
  });
}

TEST(Staging, CallerReturnsAtOnceAndTheWorkerWaitsForTheCopy) {
  expect_the_worker_to_wait_for_the_copy(
      [](StorePtr store, int rank) { return staging_group(std::move(store), rank, 2); });
}

TEST(Staging, GlooWaitsForTheCopyToo) {
  expect_the_worker_to_wait_for_the_copy([](StorePtr store, int rank) -> ProcessGroupPtr {
    return std::make_shared<StagingGloo>(std::move(store), rank, 2,
                                         GlooOptions().timeout(std::chrono::seconds(20)));
  });
}

TEST(Staging, CopiesBackDoNotHoldTheWorkerAndWorksCompleteInIssueOrder) {
  LaterCopies copies;
  detail::StagerForTesting put_in(c10::DeviceType::CPU, &copies);
  copies.hold(/*to_host=*/false, /*to_device=*/true);
  std::atomic<int> waiting{0}, checked{0};
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = staging_group(store, rank, 2);
    at::Tensor a = at::full({3000}, rank + 1.0), c = at::full({7}, 10.0 * (rank + 1));
    std::mutex order_mutex;
    std::vector<char> order;
    auto note = [&](char name) {
      std::lock_guard<std::mutex> lock(order_mutex);
      order.push_back(name);
    };
    WorkPtr wa = pg->allreduce(a);
    WorkPtr wb = pg->barrier();  // not staged: its Work waits for a's
    WorkPtr wc = pg->broadcast(c, 1);
    wa->on_complete([&] { note('a'); });
    wb->on_complete([&] { note('b'); });
    wc->on_complete([&] { note('c'); });
    // The worker went on to c while a's copy back is held: both ranks'
    // a and c reached the copy back.
    ++waiting;
    EXPECT_TRUE(eventually([&] { return copies.to_device_calls() == 4 && waiting == 2; }));
    EXPECT_FALSE(wa->is_completed() || wb->is_completed() || wc->is_completed());
    ++checked;
    // Released once both ranks have looked.
    if (rank == 0) {
      EXPECT_TRUE(eventually([&] { return checked == 2; }));
      copies.hold(false, false);
    }
    wc->wait();
    EXPECT_TRUE(wa->is_completed() && wb->is_completed());
    std::lock_guard<std::mutex> lock(order_mutex);
    EXPECT_EQ(std::string(order.begin(), order.end()), "abc");
    EXPECT_TRUE(at::all(a == 3.0).item<bool>());
    EXPECT_TRUE(at::all(c == 20.0).item<bool>());
  });
}

TEST(Staging, AnInputCopyThatNeverEndsIsATimeoutAndBreaksTheGroup) {
  LaterCopies copies;
  detail::StagerForTesting put_in(c10::DeviceType::CPU, &copies);
  copies.hold(/*to_host=*/true, /*to_device=*/false);
  spawn(1, [&](int rank, StorePtr store) {
    auto pg = staging_group(store, rank, 1, milliseconds(300));
    at::Tensor t = at::ones({64});
    WorkPtr work = pg->allreduce(t);
    Raised r = raised<TimeoutError>([&] { work->wait(std::chrono::seconds(20)); });
    ASSERT_TRUE(r) << r;
    EXPECT_TRUE(r.on(*pg)) << r;
    EXPECT_EQ(r.context.operation.rfind("allreduce", 0), 0u) << r;
    // Later operations were not run out of step with the peers.
    WorkPtr later = pg->barrier();
    Raised broken = raised<CommunicationError>([&] { later->wait(std::chrono::seconds(20)); });
    ASSERT_TRUE(broken) << broken;
    EXPECT_TRUE(broken.mentions(r.context.operation)) << broken;
  });
}

TEST(Staging, AFailedCopyIsTheWorksError) {
  for (bool to_host : {true, false}) {
    LaterCopies copies;
    detail::StagerForTesting put_in(c10::DeviceType::CPU, &copies);
    spawn(1, [&](int rank, StorePtr store) {
      auto pg = staging_group(store, rank, 1);
      at::Tensor t = at::ones({64});
      copies.fail(to_host);
      WorkPtr work = pg->allreduce(t);
      Raised r = raised<CommunicationError>([&] { work->wait(std::chrono::seconds(20)); });
      ASSERT_TRUE(r) << (to_host ? "to host: " : "to device: ") << r;
      EXPECT_TRUE(r.on(*pg)) << r;
      EXPECT_TRUE(r.mentions("copy engine fault (injected)")) << r;
      // The group is broken: a later operation fails, citing the fault.
      WorkPtr later = pg->barrier();
      Raised broken = raised<CommunicationError>([&] { later->wait(std::chrono::seconds(20)); });
      ASSERT_TRUE(broken) << broken;
      EXPECT_TRUE(broken.mentions("copy engine fault (injected)")) << broken;
    });
  }
}

TEST(Staging, DdpTrainsAsWithoutStaging) {
  constexpr int size = 2;
  const int steps = 5;
  const torch::nn::Sequential initial = small_mlp(5);
  LaterCopies copies;
  for (bool bucket_view : {false, true}) {
    // [staged][rank][step]: the parameters, flattened into one tensor.
    std::vector<std::vector<std::vector<at::Tensor>>> after(
        2, std::vector<std::vector<at::Tensor>>(size));
    for (int staged = 0; staged < 2; ++staged) {
      std::unique_ptr<detail::StagerForTesting> put_in;
      if (staged) put_in = std::make_unique<detail::StagerForTesting>(c10::DeviceType::CPU, &copies);
      spawn(size, [&](int rank, StorePtr store) {
        ProcessGroupPtr pg = staged ? staging_group(store, rank, size) : shm_group(store, rank, size);
        after[staged][rank] = ddp_steps(initial,
                                        DistributedDataParallelOptions()
                                            .process_group(pg)
                                            .bucket_cap_mb(0.01)
                                            .first_bucket_cap_mb(0.01)
                                            .gradient_as_bucket_view(bucket_view),
                                        rank, steps);
      });
    }
    for (int step = 0; step < steps; ++step) {
      for (int rank = 0; rank < size; ++rank) {
        EXPECT_TRUE(at::equal(after[1][rank][step], after[0][rank][step]))
            << "bucket view " << bucket_view << ", step " << step << ", rank " << rank;
      }
    }
  }
  EXPECT_GT(copies.to_device_calls(), 0);
}

}  // namespace
}  // namespace ddp::testing
