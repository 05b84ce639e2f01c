// The Reducer's end-of-iteration agreement (reducer/iteration_agreement.h)
// without a process group: a few ranks' agreements, their statuses summed as
// the SUM allreduce would, and each rank's decision. What matters is that
// every rank takes the same one, of the right kind, and that the counts
// restart in step after it.
#include <ddp/errors.h>

#include "reducer/iteration_agreement.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace ddp::detail {
namespace {

// A rank's decision: "agreed", or the type of the error it raised.
using Verdict = std::string;

struct Rank {
  IterationAgreement agreement;
  IterationOutcome outcome;
};

std::vector<Rank> ranks(int n) {
  std::vector<Rank> out;
  for (int r = 0; r < n; ++r) out.push_back({IterationAgreement(r, n), {}});
  return out;
}

const std::vector<std::string> kNames = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};

// One end of iteration: every rank's status (with `used[r]` in its bitmap),
// summed over the ranks not in `lost` (whose status met another collective),
// then every rank's decision. `bitmap` gets the summed bitmap.
std::vector<Verdict> exchange(std::vector<Rank>& world, const std::vector<int>& lost = {},
                              const std::vector<std::vector<int>>& used = {},
                              at::Tensor* bitmap = nullptr) {
  const int64_t len = used.empty() ? 0 : static_cast<int64_t>(kNames.size());
  std::vector<IterationStatus> statuses;
  for (size_t r = 0; r < world.size(); ++r) {
    statuses.push_back(world[r].agreement.status(len, world[r].outcome));
    for (int i : used.empty() ? std::vector<int>{} : used[r]) statuses.back().bitmap()[i] = 1;
  }
  at::Tensor sum = at::zeros_like(statuses[0].tensor());
  for (size_t r = 0; r < world.size(); ++r) {
    if (std::find(lost.begin(), lost.end(), static_cast<int>(r)) == lost.end()) {
      sum += statuses[r].tensor();
    }
  }
  if (bitmap) *bitmap = sum.narrow(0, 0, len).clone();
  std::vector<Verdict> verdicts;
  for (size_t r = 0; r < world.size(); ++r) {
    statuses[r].tensor().copy_(sum);
    try {
      world[r].agreement.decide(statuses[r], world[r].outcome, kNames);
      verdicts.push_back("agreed");
    } catch (const CollectiveMismatch&) {
      verdicts.push_back("CollectiveMismatch");
    } catch (const InvalidArgument&) {
      verdicts.push_back("InvalidArgument");
    } catch (const CommunicationError&) {
      verdicts.push_back("CommunicationError");
    }
    world[r].outcome = {};
  }
  return verdicts;
}

// Every rank's verdict is `want`.
void expect_all(const std::vector<Verdict>& got, const Verdict& want) {
  for (size_t r = 0; r < got.size(); ++r) EXPECT_EQ(got[r], want) << "rank " << r;
}

void forward_everywhere(std::vector<Rank>& world, int passes = 1) {
  for (auto& rank : world) {
    for (int k = 0; k < passes; ++k) rank.agreement.count_forward();
  }
}

TEST(IterationAgreement, RanksThatRanTheSameIterationAgreeAndSumTheBitmap) {
  auto world = ranks(3);
  for (int iteration = 0; iteration < 3; ++iteration) {
    forward_everywhere(world, 2);  // a no_sync pass, then a synchronized one
    at::Tensor bitmap;
    expect_all(exchange(world, {}, {{0}, {0, 1}, {0, 1}}, &bitmap), "agreed");
    EXPECT_TRUE(at::equal(bitmap, at::tensor({3, 2, 0, 0}, at::kInt))) << bitmap;
  }
}

TEST(IterationAgreement, AnExtraForwardOnOneRankFailsEveryRankThenTheyAreInStepAgain) {
  auto world = ranks(3);
  forward_everywhere(world);
  world[1].agreement.count_forward();              // a forward whose backward was skipped
  world[1].outcome.tally = {5, 99};                // and, as a consequence, other collectives
  expect_all(exchange(world), "InvalidArgument");  // the cause, not the symptom
  forward_everywhere(world);
  expect_all(exchange(world), "agreed");
}

TEST(IterationAgreement, AStrayBackwardFailsEveryRankOnceAndIsThenReported) {
  auto world = ranks(2);
  forward_everywhere(world, 3);
  world[0].agreement.note_stray_backward();
  world[0].agreement.note_stray_backward();  // the first one is what is reported
  EXPECT_EQ(world[0].agreement.unreported_stray(), 3);
  EXPECT_EQ(world[1].agreement.unreported_stray(), -1);
  expect_all(exchange(world), "InvalidArgument");
  EXPECT_EQ(world[0].agreement.unreported_stray(), -1);
  forward_everywhere(world);
  expect_all(exchange(world), "agreed");
}

TEST(IterationAgreement, DifferentCollectivesAreACollectiveMismatchOnEveryRank) {
  for (detail::IssuedLog::Tally other : {detail::IssuedLog::Tally{4, 7}, detail::IssuedLog::Tally{3, 8}}) {
    auto world = ranks(4);
    forward_everywhere(world);
    for (auto& rank : world) rank.outcome.tally = {3, 7};
    world[2].outcome.tally = other;  // a count or a hash apart
    expect_all(exchange(world), "CollectiveMismatch");
  }
}

TEST(IterationAgreement, AMissingGradientOnOneRankFailsEveryRank) {
  auto world = ranks(3);
  forward_everywhere(world);
  world[2].outcome.missing = {1, 3};
  expect_all(exchange(world), "InvalidArgument");
  forward_everywhere(world);
  expect_all(exchange(world), "agreed");
}

TEST(IterationAgreement, ABrokenHintOnOneRankFailsEveryRank) {
  auto world = ranks(2);
  forward_everywhere(world);
  world[0].outcome.hints_broken = {2};
  expect_all(exchange(world), "InvalidArgument");
}

TEST(IterationAgreement, AJoinedRankIsNotCountedAndCatchesUp) {
  auto world = ranks(3);
  forward_everywhere(world, 2);
  // Rank 2 ran out of inputs: it shadows, with a count of its own and
  // nothing missing; the others' counts are the ones that must agree.
  world[0].agreement.count_forward();
  world[1].agreement.count_forward();
  world[2].outcome.joined = true;
  expect_all(exchange(world), "agreed");
  // Back in training (the next epoch), rank 2 is in step with the others.
  forward_everywhere(world);
  expect_all(exchange(world), "agreed");
}

TEST(IterationAgreement, EveryRankJoinedAgrees) {
  auto world = ranks(2);
  world[0].agreement.count_forward();
  for (auto& rank : world) rank.outcome.joined = true;
  expect_all(exchange(world), "agreed");
}

TEST(IterationAgreement, AStatusThatMetAnotherCollectiveIsACommunicationError) {
  auto world = ranks(3);
  forward_everywhere(world);
  expect_all(exchange(world, /*lost=*/{1}), "CommunicationError");
}

}  // namespace
}  // namespace ddp::detail
