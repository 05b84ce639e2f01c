// The job's store (rendezvous/job_store.h) on an in-process store: values
// round-trip under the job's prefix with their MAC; a value written past it
// (a stranger who listed the keys) or by another job is refused on get(),
// naming the key; compare-and-set is sealed both ways.
#include "rendezvous/job_store.h"

#include "support/raised.h"

#include <ddp/errors.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <gtest/gtest.h>

namespace ddp::detail {
namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

const JobSecret kSecret("0123456789abcdef0123456789abcdef");

TEST(JobStore, ValuesRoundTripUnderTheJobsPrefix) {
  auto raw = c10::make_intrusive<c10d::HashStore>();
  JobStore job(raw, kSecret, "challenge");
  job.set("ddp/gloo/addresses/0", bytes("10.0.0.1:4242"));
  EXPECT_EQ(job.get("ddp/gloo/addresses/0"), bytes("10.0.0.1:4242"));
  EXPECT_FALSE(raw->check({"ddp/gloo/addresses/0"}));
  EXPECT_TRUE(raw->check({kSecret.key_prefix("challenge") + "/ddp/gloo/addresses/0"}));
  // Counters are not sealed: add() works as on any store.
  EXPECT_EQ(job.add("count", 2), 2);
}

TEST(JobStore, AValueAStrangerWroteIsRefusedNamingTheKey) {
  auto raw = c10::make_intrusive<c10d::HashStore>();
  JobStore job(raw, kSecret, "challenge");
  job.set("ddp/gloo/addresses/0", bytes("10.0.0.1:4242"));
  const std::string listed = kSecret.key_prefix("challenge") + "/ddp/gloo/addresses/0";
  raw->set(listed, bytes("10.6.6.6:4242"));
  ddp::testing::Raised r =
      ddp::testing::raised<CommunicationError>([&] { job.get("ddp/gloo/addresses/0"); });
  ASSERT_TRUE(r) << "a value without the job's MAC was taken: " << r;
  EXPECT_TRUE(r.mentions("'ddp/gloo/addresses/0'")) << r;
  // A sealed value copied from another key does not pass either.
  job.set("a", bytes("x"));
  raw->set(kSecret.key_prefix("challenge") + "/b",
           raw->get(kSecret.key_prefix("challenge") + "/a"));
  EXPECT_THROW(job.get("b"), CommunicationError);
}

TEST(JobStore, AnotherJobsValuesDoNotPass) {
  auto raw = c10::make_intrusive<c10d::HashStore>();
  JobStore earlier(raw, kSecret, "challenge1");
  earlier.set("k", bytes("v"));
  // The same secret, another job (challenge): other keys, and a value
  // carried over is refused.
  JobStore later(raw, kSecret, "challenge2");
  EXPECT_FALSE(later.check({"k"}));
  raw->set(kSecret.key_prefix("challenge2") + "/k",
           raw->get(kSecret.key_prefix("challenge1") + "/k"));
  EXPECT_THROW(later.get("k"), CommunicationError);
}

// An elastic job decides each generation by compare-and-set: sealed both
// ways, first writer wins, and a stranger's value in the way is refused.
TEST(JobStore, CompareSetIsSealedAndChecked) {
  auto raw = c10::make_intrusive<c10d::HashStore>();
  JobStore job(raw, kSecret, "challenge");
  EXPECT_EQ(job.compareSet("decided", {}, bytes("members 0,1")), bytes("members 0,1"));
  EXPECT_EQ(job.compareSet("decided", {}, bytes("members 0,2")), bytes("members 0,1"));
  EXPECT_EQ(job.get("decided"), bytes("members 0,1"));
  EXPECT_EQ(job.compareSet("decided", bytes("members 0,1"), bytes("members 2")),
            bytes("members 2"));
  EXPECT_EQ(job.get("decided"), bytes("members 2"));
  // A stranger's decision (no MAC) is refused, not taken as the winner.
  const std::string listed = kSecret.key_prefix("challenge") + "/forged";
  raw->set(listed, bytes("members 6"));
  ddp::testing::Raised r = ddp::testing::raised<CommunicationError>(
      [&] { job.compareSet("forged", {}, bytes("members 0")); });
  ASSERT_TRUE(r) << "a forged decision was taken: " << r;
  EXPECT_TRUE(r.mentions("'forged'")) << r;
}

}  // namespace
}  // namespace ddp::detail
