// The elastic runner's seam between the heartbeat and a generation's group
// (src/elastic/generation_abort.h): a gone member aborts the armed
// generation's group once, and only that generation's.
#include "elastic/generation_abort.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using ddp::detail::elastic::GenerationAbort;

TEST(GenerationAbort, AGoneMemberAbortsTheArmedGenerationOnce) {
  GenerationAbort seam;
  std::vector<std::string> reasons;
  seam.arm(3, [&](const std::string& reason) { reasons.push_back(reason); });
  EXPECT_TRUE(seam.member_gone(3, 7));
  EXPECT_FALSE(seam.member_gone(3, 8));  // once per generation
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_NE(reasons[0].find("member 7 of generation 3 is gone"), std::string::npos) << reasons[0];
}

TEST(GenerationAbort, NewsOfAnotherGenerationIsIgnored) {
  GenerationAbort seam;
  int calls = 0;
  seam.arm(4, [&](const std::string&) { ++calls; });
  EXPECT_FALSE(seam.member_gone(3, 1));  // the heartbeat still watched the last one
  EXPECT_FALSE(seam.member_gone(5, 1));
  EXPECT_FALSE(seam.member_gone(-1, 1));
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(seam.member_gone(4, 1));
  EXPECT_EQ(calls, 1);
}

TEST(GenerationAbort, NothingAfterDisarmOrBeforeArm) {
  GenerationAbort seam;
  EXPECT_FALSE(seam.member_gone(0, 1));
  int calls = 0;
  seam.arm(0, [&](const std::string&) { ++calls; });
  seam.disarm();
  EXPECT_FALSE(seam.member_gone(0, 1));
  seam.arm(1, [&](const std::string&) { ++calls; });
  EXPECT_TRUE(seam.member_gone(1, 2));
  EXPECT_EQ(calls, 1);
}

// The abort runs outside the seam's lock: it may disarm (the runner's
// generation ending as the group fails) without a deadlock.
TEST(GenerationAbort, TheAbortMayDisarm) {
  GenerationAbort seam;
  bool called = false;
  seam.arm(2, [&](const std::string&) {
    seam.disarm();
    called = true;
  });
  EXPECT_TRUE(seam.member_gone(2, 0));
  EXPECT_TRUE(called);
}

}  // namespace
