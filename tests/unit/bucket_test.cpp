#include <ddp/bucket.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace ddp {
namespace {

using Buckets = std::vector<std::vector<size_t>>;

std::vector<at::Tensor> floats(std::vector<int64_t> numels) {
  std::vector<at::Tensor> out;
  for (auto n : numels) out.push_back(at::empty({n}, at::kFloat));
  return out;
}

TEST(AssignBuckets, ReverseOrderFirstBucketSmallThenCap) {
  // 10 tensors of 400 bytes; first cap 800 B, then 1200 B.
  auto t = floats(std::vector<int64_t>(10, 100));
  Buckets b = assign_buckets(t, reverse_order(10), 800, 1200);
  EXPECT_EQ(b, (Buckets{{9, 8}, {7, 6, 5}, {4, 3, 2}, {1, 0}}));
}

// bucket_cap_mb below first_bucket_cap_mb does not cap the first bucket
// (as in PyTorch 1.13; documented in docs/ddp.md and the options' comments).
TEST(AssignBuckets, FirstCapIsNotCappedByTheCap) {
  auto t = floats(std::vector<int64_t>(6, 100));  // 400 B each; first cap 1200 B, then 400 B
  Buckets b = assign_buckets(t, reverse_order(6), 1200, 400);
  EXPECT_EQ(b, (Buckets{{5, 4, 3}, {2}, {1}, {0}}));
}

// A cap per bucket (bucket_cap_mb_list): the k-th bucket closes at the k-th
// cap, the last repeating; {first, cap} is the two-cap form.
TEST(AssignBuckets, ACapPerBucketTheLastRepeating) {
  auto t = floats(std::vector<int64_t>(12, 100));  // 400 B each
  Buckets b = assign_buckets(t, reverse_order(12), std::vector<int64_t>{400, 1200, 800});
  EXPECT_EQ(b, (Buckets{{11}, {10, 9, 8}, {7, 6}, {5, 4}, {3, 2}, {1, 0}}));
  EXPECT_EQ(assign_buckets(t, reverse_order(12), std::vector<int64_t>{800, 1200}),
            assign_buckets(t, reverse_order(12), 800, 1200));
  EXPECT_EQ(assign_buckets(t, reverse_order(12), std::vector<int64_t>{1600}),
            assign_buckets(t, reverse_order(12), 1600, 1600));
}

// Each (dtype, device) counts its own buckets against the list.
TEST(AssignBuckets, EachDtypeWalksTheListOnItsOwn) {
  std::vector<at::Tensor> t = {at::empty({100}, at::kFloat), at::empty({50}, at::kDouble),
                               at::empty({100}, at::kFloat), at::empty({50}, at::kDouble),
                               at::empty({100}, at::kFloat)};
  Buckets b = assign_buckets(t, {0, 1, 2, 3, 4}, std::vector<int64_t>{400, 800});
  EXPECT_EQ(b, (Buckets{{0}, {1}, {2, 4}, {3}}));
}

TEST(AssignBuckets, LargeTensorGetsItsOwnBucket) {
  auto t = floats({10, 1000, 10, 10});  // 40 B, 4000 B, 40 B, 40 B
  Buckets b = assign_buckets(t, {0, 1, 2, 3}, 1000, 1000);
  EXPECT_EQ(b, (Buckets{{0}, {1}, {2, 3}}));
}

// The last layer's weight of an MLP is larger than the small first bucket:
// it must go alone and at once, not open the next, larger bucket.
TEST(AssignBuckets, TensorLargerThanTheFirstCapIsAloneToo) {
  auto t = floats({10, 1000, 10, 10, 10});  // 40 B, 4000 B, 40 B x 3
  Buckets b = assign_buckets(t, {0, 1, 2, 3, 4}, 100, 10000);
  EXPECT_EQ(b, (Buckets{{0}, {1}, {2, 3, 4}}));
}

TEST(AssignBuckets, DtypesNeverShareABucket) {
  std::vector<at::Tensor> t = {at::empty({10}, at::kFloat), at::empty({10}, at::kDouble),
                               at::empty({10}, at::kFloat), at::empty({10}, at::kDouble)};
  Buckets b = assign_buckets(t, {0, 1, 2, 3}, 1 << 20, 1 << 20);
  EXPECT_EQ(b, (Buckets{{0, 2}, {1, 3}}));
}

TEST(AssignBuckets, ZeroCapPutsEveryTensorAlone) {
  auto t = floats({5, 5, 5});
  EXPECT_EQ(assign_buckets(t, reverse_order(3), 0, 0), (Buckets{{2}, {1}, {0}}));
}

TEST(AssignBuckets, FollowsAGivenOrder) {
  auto t = floats({100, 100, 100, 100});
  Buckets b = assign_buckets(t, {2, 0, 3, 1}, 800, 800);
  EXPECT_EQ(b, (Buckets{{2, 0}, {3, 1}}));
}

TEST(AssignBuckets, EmptyTensorsStillGetABucket) {
  auto t = floats({0, 0});
  EXPECT_EQ(assign_buckets(t, {0, 1}, 100, 100), (Buckets{{0, 1}}));
}

}  // namespace
}  // namespace ddp
