// GradReadyHook (ddp/grad_ready_hook.h): when it runs, what it sees, how it
// goes away, what it refuses.
#include <ddp/errors.h>
#include <ddp/grad_ready_hook.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace ddp::testing {
namespace {

TEST(GradReadyHook, RunsOncePerBackwardWithTheAccumulatedGradient) {
  torch::Tensor w = torch::ones({3}, torch::requires_grad());
  std::vector<torch::Tensor> seen;
  GradReadyHook hook(w, [&] { seen.push_back(w.grad().clone()); });
  for (int pass = 0; pass < 2; ++pass) (w * 2).sum().backward();  // accumulates: 2, then 4
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_TRUE(torch::equal(seen[0], torch::full({3}, 2.0)));
  EXPECT_TRUE(torch::equal(seen[1], torch::full({3}, 4.0)));
}

TEST(GradReadyHook, RunsOncePerUseOfTheParameterOnlyAfterItsWholeGradient) {
  torch::Tensor w = torch::ones({2}, torch::requires_grad());
  std::vector<torch::Tensor> seen;
  GradReadyHook hook(w, [&] { seen.push_back(w.grad().clone()); });
  (w * 3 + w * w).sum().backward();  // two uses, one accumulation: 3 + 2w = 5
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_TRUE(torch::equal(seen[0], torch::full({2}, 5.0)));
}

TEST(GradReadyHook, IsGoneOnceDestroyed) {
  torch::Tensor w = torch::ones({1}, torch::requires_grad());
  int calls = 0;
  {
    GradReadyHook hook(w, [&] { ++calls; });
    w.sum().backward();
  }
  w.sum().backward();
  EXPECT_EQ(calls, 1);
}

// The callback's own exception type, and a value it carries.
struct FromTheHook : std::runtime_error {
  explicit FromTheHook(int code) : std::runtime_error("from the hook"), code(code) {}
  int code;
};

TEST(GradReadyHook, AnExceptionFromTheCallbackComesOutOfBackward) {
  torch::Tensor w = torch::ones({1}, torch::requires_grad());
  GradReadyHook hook(w, [] { throw FromTheHook(7); });
  try {
    w.sum().backward();
    FAIL() << "backward() returned";
  } catch (const FromTheHook& e) {
    EXPECT_EQ(e.code, 7);  // the callback's exception itself, not a copy of its text
  } catch (const std::exception& e) {
    FAIL() << "another exception came out of backward(): " << e.what();
  }
}

TEST(GradReadyHook, OnlyLeavesThatRequireGrad) {
  torch::Tensor frozen = torch::ones({1});
  torch::Tensor w = torch::ones({1}, torch::requires_grad());
  torch::Tensor non_leaf = w * 2;
  EXPECT_THROW(GradReadyHook(frozen, [] {}), InvalidArgument);
  EXPECT_THROW(GradReadyHook(non_leaf, [] {}), InvalidArgument);
  EXPECT_THROW(GradReadyHook(torch::Tensor(), [] {}), InvalidArgument);
}

}  // namespace
}  // namespace ddp::testing
