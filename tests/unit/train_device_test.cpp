// examples/train's --device (examples/train_device.h): the device and the
// backend each rank takes for what it sees, and the error without a GPU.
#include "train_device.h"

#include <gtest/gtest.h>

#include <string>

namespace {

using train::choose_device;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(TrainDevice, CpuIsTheCpuWhateverTheGpus) {
  const auto c = choose_device("cpu", 8, 0, 2, "", true, false);
  EXPECT_FALSE(c.cuda);
  EXPECT_EQ(c.backend, "");
  EXPECT_EQ(c.why, "cpu (--device cpu)");
}

TEST(TrainDevice, AutoWithoutAGpuIsTheCpu) {
  const auto c = choose_device("auto", 0, 1, 2, "", true, false);
  EXPECT_FALSE(c.cuda);
  EXPECT_TRUE(has(c.why, "libtorch sees no GPU")) << c.why;
}

TEST(TrainDevice, CudaWithoutAGpuSaysWhatToCheck) {
  try {
    choose_device("cuda", 0, 0, 2, "", true, false);
    FAIL() << "no error";
  } catch (const train::DeviceError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(has(what, "--device cuda: libtorch sees no GPU")) << what;
    EXPECT_TRUE(has(what, "CUDA_VISIBLE_DEVICES")) << what;
    EXPECT_TRUE(has(what, "--device cpu or auto")) << what;
  }
}

TEST(TrainDevice, AGpuPerRankGoesOverNccl) {
  for (const char* requested : {"auto", "cuda"}) {
    const auto c = choose_device(requested, 4, 3, 4, "", true, false);
    EXPECT_TRUE(c.cuda);
    EXPECT_EQ(c.index, 3);
    EXPECT_EQ(c.backend, "nccl");
    EXPECT_EQ(c.why, "cuda:3 (4 GPU(s) for 4 rank(s) on this host: one each), backend nccl");
  }
}

TEST(TrainDevice, RanksSharingAGpuStageOverAuto) {
  const auto c = choose_device("auto", 1, 2, 3, "", true, false);
  EXPECT_TRUE(c.cuda);
  EXPECT_EQ(c.index, 0);
  EXPECT_EQ(c.backend, "");
  EXPECT_TRUE(has(c.why, "shared"));
  EXPECT_TRUE(has(c.why, "NCCL_MULTI_RANK_GPU_ENABLE=1")) << c.why;
  EXPECT_EQ(choose_device("auto", 2, 3, 4, "", true, false).index, 1);
}

TEST(TrainDevice, NoNcclBuiltOrElasticStageOverAuto) {
  const auto no_nccl = choose_device("cuda", 2, 0, 2, "", false, false);
  EXPECT_EQ(no_nccl.backend, "");
  EXPECT_TRUE(has(no_nccl.why, "no nccl backend")) << no_nccl.why;
  const auto elastic = choose_device("cuda", 2, 0, 2, "", true, true);
  EXPECT_EQ(elastic.backend, "");
  EXPECT_TRUE(has(elastic.why, "--elastic")) << elastic.why;
}

TEST(TrainDevice, DdpBackendWins) {
  const auto c = choose_device("auto", 1, 1, 2, "nccl", true, false);
  EXPECT_EQ(c.backend, "nccl");
  EXPECT_TRUE(has(c.why, "backend nccl (DDP_BACKEND)")) << c.why;
  EXPECT_EQ(choose_device("cpu", 1, 0, 2, "gloo", true, false).backend, "");
}

TEST(TrainDevice, DeviceOf) {
  EXPECT_EQ(train::device_of(choose_device("auto", 2, 1, 2, "", true, false)), c10::Device("cuda:1"));
  EXPECT_EQ(train::device_of(choose_device("cpu", 2, 1, 2, "", true, false)), c10::Device("cpu"));
}

}  // namespace
