// Bucket autotuning's schedule and decision (src/reducer/bucket_tuner.h),
// fed made-up timings, and the bucket_cap_mb option it is asked for with.
#include "reducer/bucket_tuner.h"

#include <ddp/bucket_cap.h>
#include <ddp/errors.h>

#include "support/raised.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <type_traits>
#include <vector>

namespace ddp::detail {
namespace {

constexpr int64_t MiB = 1 << 20;
const std::vector<int64_t> kPaperCaps = {1 * MiB,  2 * MiB,  5 * MiB,  10 * MiB,
                                         25 * MiB, 50 * MiB, 100 * MiB};

// Runs a tuner to the end: `time(cap, iteration)` is each iteration's time
// (nullopt: it failed). Returns the caps the iterations ran with.
std::vector<int64_t> run(BucketTuner& tuner,
                         const std::function<std::optional<double>(int64_t, int)>& time) {
  std::vector<int64_t> ran;
  std::optional<double> previous;
  for (int i = 0; i < 1000 && !tuner.settled(); ++i) {
    const int64_t cap = tuner.next(previous);
    if (tuner.settled()) break;
    ran.push_back(cap);
    previous = time(cap, i);
  }
  return ran;
}

TEST(BucketTuner, FindsTheFastestOfThePapersSizesWithinTwentyIterations) {
  // Fastest at 10 MiB, by 10 % over the others.
  BucketTuner tuner(kPaperCaps, 25 * MiB, 20, 0.02);
  auto ran = run(tuner, [](int64_t cap, int) { return cap == 10 * MiB ? 90.0 : 100.0; });
  EXPECT_TRUE(tuner.settled());
  EXPECT_EQ(tuner.chosen(), 10 * MiB);
  EXPECT_LE(ran.size(), 20u);
  EXPECT_EQ(tuner.trial_iterations(), static_cast<int>(ran.size()));
  // Every size runs twice in the first round (settle, measure), in order.
  for (size_t k = 0; k < kPaperCaps.size(); ++k) {
    EXPECT_EQ(ran[2 * k], kPaperCaps[k]);
    EXPECT_EQ(ran[2 * k + 1], kPaperCaps[k]);
  }
}

TEST(BucketTuner, KeepsThePreferredSizeUnlessAnotherIsFasterByTheMargin) {
  for (double other : {99.0, 98.5, 97.5}) {
    BucketTuner tuner({1 * MiB, 25 * MiB}, 25 * MiB, 20, 0.02);
    run(tuner, [&](int64_t cap, int) { return cap == 25 * MiB ? 100.0 : other; });
    EXPECT_EQ(tuner.chosen(), other < 98.0 ? 1 * MiB : 25 * MiB) << other;
  }
}

// 25 MiB measured at 100 and 110 ms: its samples vary by 9 %, this
// machine's noise, so a size 8 % faster does not displace it, one 12 %
// faster does.
TEST(BucketTuner, KeepsThePreferredSizeWithinItsOwnNoise) {
  for (double other : {92.0, 88.0}) {
    BucketTuner tuner({1 * MiB, 25 * MiB}, 25 * MiB, 20, 0.02);
    int preferred_runs = 0;
    run(tuner, [&](int64_t cap, int) {
      if (cap != 25 * MiB) return other;
      return ++preferred_runs % 2 ? 100.0 : 110.0;
    });
    EXPECT_EQ(tuner.chosen(), other < 90.0 ? 1 * MiB : 25 * MiB) << other;
  }
}

TEST(BucketTuner, TheSameTimingsGiveTheSameSteps) {
  auto noisy = [](int64_t cap, int i) {
    return 100.0 + static_cast<double>((cap / MiB * 7919 + i * 104729) % 23);
  };
  BucketTuner a(kPaperCaps, 25 * MiB, 20, 0.02), b(kPaperCaps, 25 * MiB, 20, 0.02);
  EXPECT_EQ(run(a, noisy), run(b, noisy));
  EXPECT_EQ(a.chosen(), b.chosen());
}

// Later rounds measure the faster half again, the preferred size among
// them; the best sample of each size counts, so a disturbed one in a later
// round does not disqualify.
TEST(BucketTuner, LaterRoundsMeasureTheFasterHalfAgain) {
  std::map<int64_t, int> measured;
  BucketTuner tuner({1 * MiB, 5 * MiB, 25 * MiB}, 25 * MiB, 20, 0.02);
  int calls = 0;
  auto ran = run(tuner, [&](int64_t cap, int) {
    ++calls;
    if (cap == 5 * MiB && calls == 9) return 500.0;  // its second measurement, disturbed
    return cap == 5 * MiB ? 80.0 : 100.0;
  });
  EXPECT_EQ(tuner.chosen(), 5 * MiB);
  for (const auto& s : tuner.samples()) ++measured[s.cap_bytes];
  EXPECT_EQ(measured[1 * MiB], 1) << "dropped after the first round";
  EXPECT_GT(measured[25 * MiB], 1) << "the preferred size stays in every round";
  EXPECT_GT(measured[5 * MiB], 2);
  EXPECT_EQ(ran.size(), 18u);
}

// A failed iteration is no sample: its step runs again, within the budget.
TEST(BucketTuner, AFailedMeasurementRunsAgainAndTheBudgetBoundsTheRetries) {
  BucketTuner tuner({1 * MiB, 25 * MiB}, 25 * MiB, 8, 0.02);
  auto ran = run(tuner, [](int64_t cap, int i) -> std::optional<double> {
    if (i == 1) return std::nullopt;  // 1 MiB's measured iteration failed
    return cap == 1 * MiB ? 50.0 : 100.0;
  });
  // 1 MiB settles, fails, is measured; 25 MiB settles, is measured; then a
  // round of both again, 25 MiB first (already in place, no settling).
  EXPECT_EQ(ran, (std::vector<int64_t>{1 * MiB, 1 * MiB, 1 * MiB, 25 * MiB, 25 * MiB, 25 * MiB,
                                       1 * MiB, 1 * MiB}));
  EXPECT_EQ(tuner.samples().size(), 4u);
  EXPECT_EQ(tuner.chosen(), 1 * MiB);

  BucketTuner failing({1 * MiB, 25 * MiB}, 25 * MiB, 8, 0.02);
  auto all = run(failing, [](int64_t, int) { return std::nullopt; });
  EXPECT_LE(all.size(), 8u);
  EXPECT_TRUE(failing.samples().empty());
  EXPECT_EQ(failing.chosen(), 25 * MiB) << "nothing measured: the preferred size";
}

// Seven sizes in 19 iterations: after the first round (14) five are left,
// enough for two sizes only if neither is in place; every trial size of
// the second round is measured, none only settled.
TEST(BucketTuner, ARoundTheBudgetCannotFinishIsCutBeforeItStarts) {
  BucketTuner tuner(kPaperCaps, 25 * MiB, 19, 0.02);
  auto ran = run(tuner, [](int64_t cap, int) { return cap == 10 * MiB ? 90.0 : 100.0; });
  EXPECT_EQ(ran.size(), 18u);
  std::map<int64_t, int> runs, measured;
  for (int64_t cap : ran) ++runs[cap];
  for (const auto& s : tuner.samples()) ++measured[s.cap_bytes];
  for (const auto& [cap, n] : runs) EXPECT_EQ(n, 2 * measured[cap]) << cap;
  EXPECT_EQ(measured[10 * MiB], 2);
  EXPECT_EQ(measured[25 * MiB], 2);
  EXPECT_EQ(tuner.chosen(), 10 * MiB);
}

TEST(BucketTuner, OneCandidateIsSettledAtOnce) {
  BucketTuner tuner({25 * MiB}, 25 * MiB, 20, 0.02);
  EXPECT_TRUE(tuner.settled());
  EXPECT_EQ(tuner.next(std::nullopt), 25 * MiB);
  EXPECT_EQ(tuner.trial_iterations(), 0);
}

TEST(BucketTuner, RejectsABudgetTooSmallOrAMissingPreferredSize) {
  EXPECT_THROW(BucketTuner(kPaperCaps, 25 * MiB, 13, 0.02), InvalidArgument);
  EXPECT_THROW(BucketTuner({1 * MiB, 2 * MiB}, 25 * MiB, 20, 0.02), InvalidArgument);
}

TEST(BucketCapMb, ParsesSizesAndAutoAndNamesWhatItCannotRead) {
  EXPECT_TRUE(BucketCapMb("auto").is_auto());
  EXPECT_EQ(BucketCapMb("auto").to_string(), "auto");
  EXPECT_DOUBLE_EQ(BucketCapMb("12.5").mib(), 12.5);
  EXPECT_DOUBLE_EQ(BucketCapMb(0).mib(), 0);
  EXPECT_FALSE(BucketCapMb(50).is_auto());
  EXPECT_TRUE(BucketCapMb().is_default());
  testing::Raised r = testing::raised<InvalidArgument>([] { BucketCapMb("fast"); });
  ASSERT_TRUE(r) << r;
  EXPECT_TRUE(r.mentions("bucket_cap_mb")) << r;  // the option
  EXPECT_TRUE(r.mentions("'fast'")) << r;         // and what it was given
  for (const char* bad : {"25MB", "", " 25", "0x19", "-1", "nan"}) {
    EXPECT_THROW(BucketCapMb{bad}, InvalidArgument) << bad;
  }
  static_assert(!std::is_convertible_v<bool, BucketCapMb>, "a bool is no size");
  static_assert(!std::is_convertible_v<char, BucketCapMb>, "nor is a character");
  static_assert(std::is_convertible_v<int64_t, BucketCapMb>);
}

TEST(BucketCapMb, TheDefaultComesFromTheEnvironment) {
  unsetenv("DDP_BUCKET_CAP_MB");
  EXPECT_DOUBLE_EQ(BucketCapMb().resolved().mib(), 25);
  EXPECT_FALSE(BucketCapMb().resolved().is_auto());
  setenv("DDP_BUCKET_CAP_MB", "auto", 1);
  EXPECT_TRUE(BucketCapMb().resolved().is_auto());
  EXPECT_DOUBLE_EQ(BucketCapMb(10).resolved().mib(), 10) << "a size given wins";
  setenv("DDP_BUCKET_CAP_MB", "40", 1);
  EXPECT_DOUBLE_EQ(BucketCapMb().resolved().mib(), 40);
  setenv("DDP_BUCKET_CAP_MB", "-5", 1);
  testing::Raised r = testing::raised<InvalidArgument>([] { BucketCapMb().resolved(); });
  EXPECT_TRUE(r) << r;
  EXPECT_TRUE(r.mentions("$DDP_BUCKET_CAP_MB")) << r;  // the variable
  EXPECT_TRUE(r.mentions("-5")) << r;                  // and its value
  setenv("DDP_BUCKET_CAP_MB", "big", 1);
  r = testing::raised<InvalidArgument>([] { BucketCapMb().resolved(); });
  EXPECT_TRUE(r) << r;
  EXPECT_TRUE(r.mentions("DDP_BUCKET_CAP_MB")) << r;
  EXPECT_TRUE(r.mentions("'big'")) << r;
  unsetenv("DDP_BUCKET_CAP_MB");
}

}  // namespace
}  // namespace ddp::detail
