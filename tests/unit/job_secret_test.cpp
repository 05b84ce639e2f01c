// The job secret's primitives (rendezvous/job_secret.h): HMAC-SHA256 against
// RFC 4231's test vectors, the key prefix, the checks on DDP_JOB_SECRET.
#include "rendezvous/job_secret.h"

#include "support/raised.h"

#include <ddp/errors.h>

#include <gtest/gtest.h>

#include <cstdlib>

namespace ddp::detail {
namespace {

TEST(JobSecret, MacIsHmacSha256OfRfc4231) {
  // RFC 4231, test case 2: key "Jefe".
  EXPECT_EQ(JobSecret("Jefe").mac("what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a 131-byte key (longer than SHA-256's block: hashed first).
  EXPECT_EQ(JobSecret(std::string(131, '\xaa'))
                .mac("Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(JobSecret, KeyPrefixIsTheSameForOneJobAndUnrelatedForAnother) {
  const std::string a = JobSecret("0123456789abcdef0123").key_prefix("challenge1");
  EXPECT_EQ(a, JobSecret("0123456789abcdef0123").key_prefix("challenge1"));
  EXPECT_NE(a, JobSecret("0123456789abcdef0124").key_prefix("challenge1"));
  EXPECT_NE(a, JobSecret("0123456789abcdef0123").key_prefix("challenge2"));
  EXPECT_EQ(a.rfind("ddp/job/", 0), 0u);
  EXPECT_EQ(a.size(), std::string("ddp/job/").size() + 32);
  EXPECT_EQ(a.find("0123456789abcdef"), std::string::npos);
}

TEST(JobSecret, FromEnvTakesLongSecretsAndRefusesShortOnesWithoutShowingThem) {
  unsetenv(kJobSecretVariable);
  EXPECT_FALSE(JobSecret::from_env().has_value());
  setenv(kJobSecretVariable, "0123456789abcdef", 1);
  ASSERT_TRUE(JobSecret::from_env().has_value());
  EXPECT_EQ(JobSecret::from_env()->mac("m"), JobSecret("0123456789abcdef").mac("m"));
  setenv(kJobSecretVariable, "tooshort", 1);
  ddp::testing::Raised r = ddp::testing::raised([] { JobSecret::from_env(); });
  ASSERT_TRUE(r) << "a secret of 8 characters was taken: " << r;
  // The variable, the secret's length and the least one taken; never the secret.
  EXPECT_TRUE(r.mentions(kJobSecretVariable)) << r;
  EXPECT_TRUE(r.mentions(" 8 ")) << r;
  EXPECT_TRUE(r.mentions(std::to_string(kMinJobSecretLength))) << r;
  EXPECT_FALSE(r.mentions("tooshort")) << r;
  unsetenv(kJobSecretVariable);
}

TEST(JobSecret, RandomHexIsFreshEachTime) {
  const std::string a = random_hex(16), b = random_hex(16);
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

TEST(JobSecret, ConstantTimeEqualityIsEquality) {
  EXPECT_TRUE(equal_in_constant_time("abc", "abc"));
  EXPECT_FALSE(equal_in_constant_time("abc", "abd"));
  EXPECT_FALSE(equal_in_constant_time("abc", "abcd"));
  EXPECT_TRUE(equal_in_constant_time("", ""));
}

}  // namespace
}  // namespace ddp::detail
