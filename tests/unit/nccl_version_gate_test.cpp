// The nccl backend's version rules (src/collectives/nccl/version_gate.h):
// when ranks may share a GPU, and which loaded NCCL serves ddp's headers.
// Plain C++: they run on every build, with or without a GPU or NCCL.
#include "collectives/nccl/version_gate.h"

#include <gtest/gtest.h>

#include <string>

namespace {

using ddp::detail::nccl::loaded_version_mismatch;
using ddp::detail::nccl::shared_gpu_refusal;
using ddp::detail::nccl::version_code;
using ddp::detail::nccl::version_text;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(NcclVersionGate, VersionText) {
  EXPECT_EQ(version_text(version_code(2, 28, 9)), "2.28.9");
  EXPECT_EQ(version_text(23007), "2.30.7");
}

TEST(NcclVersionGate, SharedGpuNeedsBothTheVersionAndTheVariable) {
  EXPECT_EQ(shared_gpu_refusal(version_code(2, 30, 7), "1"), "");
  EXPECT_EQ(shared_gpu_refusal(version_code(2, 30, 0), "1"), "");
  EXPECT_EQ(shared_gpu_refusal(version_code(3, 0, 0), "1"), "");
  EXPECT_NE(shared_gpu_refusal(version_code(2, 30, 7), nullptr), "");
  EXPECT_NE(shared_gpu_refusal(version_code(2, 30, 7), "0"), "");
  EXPECT_NE(shared_gpu_refusal(version_code(2, 30, 7), ""), "");
  EXPECT_NE(shared_gpu_refusal(version_code(2, 28, 9), "1"), "");
  EXPECT_NE(shared_gpu_refusal(version_code(2, 29, 99), "1"), "");
}

TEST(NcclVersionGate, OldNcclRefusalNamesTheVersionThatWouldAllowIt) {
  const std::string why = shared_gpu_refusal(version_code(2, 28, 9), "1");
  EXPECT_TRUE(has(why, "NCCL 2.28.9 needs a GPU per rank")) << why;
  EXPECT_TRUE(has(why, "NCCL 2.30.0 and later")) << why;
  EXPECT_TRUE(has(why, "NCCL_MULTI_RANK_GPU_ENABLE=1")) << why;
  EXPECT_TRUE(has(why, "scripts/build-nccl.sh")) << why;
  EXPECT_TRUE(has(why, "shm")) << why;
}

TEST(NcclVersionGate, NewNcclRefusalNamesTheVariableAndItsValue) {
  const std::string unset = shared_gpu_refusal(version_code(2, 30, 7), nullptr);
  EXPECT_TRUE(has(unset, "NCCL 2.30.7 accepts ranks sharing a GPU only with "
                         "NCCL_MULTI_RANK_GPU_ENABLE=1 (it is unset)"))
      << unset;
  const std::string zero = shared_gpu_refusal(version_code(2, 30, 7), "0");
  EXPECT_TRUE(has(zero, "(it is \"0\")")) << zero;
  EXPECT_TRUE(has(zero, "set it on every rank")) << zero;
}

TEST(NcclVersionGate, LoadedNcclServesOlderHeadersOfItsMajor) {
  EXPECT_EQ(loaded_version_mismatch(version_code(2, 28, 9), "/w/libnccl.so.2", version_code(2, 28, 9)),
            "");
  EXPECT_EQ(loaded_version_mismatch(version_code(2, 30, 7), "/w/libnccl.so.2", version_code(2, 28, 9)),
            "");
}

TEST(NcclVersionGate, OlderLoadedNcclIsNamedWithItsFile) {
  const std::string why =
      loaded_version_mismatch(version_code(2, 28, 9), "/w/libnccl.so.2", version_code(2, 30, 7));
  EXPECT_TRUE(has(why, "loaded NCCL 2.28.9 (/w/libnccl.so.2)")) << why;
  EXPECT_TRUE(has(why, "compiled against NCCL 2.30.7's headers")) << why;
  EXPECT_TRUE(has(why, "or a later one")) << why;
  EXPECT_TRUE(has(why, "LD_PRELOAD")) << why;
}

TEST(NcclVersionGate, AnotherMajorIsRefused) {
  const std::string why =
      loaded_version_mismatch(version_code(3, 0, 0), "/x/libnccl.so.3", version_code(2, 28, 9));
  EXPECT_TRUE(has(why, "in the same major version")) << why;
}

}  // namespace
