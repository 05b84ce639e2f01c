// The run-time check for a second libtorch (src/compat/one_libtorch.h): the
// folders it reports, and that this test's own process (one libtorch) passes.
#include "compat/one_libtorch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

using ddp::compat::other_libtorch_folders;

TEST(OneLibtorch, OwnLibrariesAloneAreNoOther) {
  EXPECT_TRUE(other_libtorch_folders({"/opt/torch/lib/libc10.so", "/opt/torch/lib/libtorch_cpu.so"},
                                     "/opt/torch/lib/libc10.so")
                  .empty());
}

TEST(OneLibtorch, AnotherFolderIsNamedOnce) {
  const std::vector<std::string> loaded = {
      "/opt/torch/lib/libc10.so", "/usr/lib/x86_64-linux-gnu/libc10.so.1.13",
      "/opt/torch/lib/libtorch_cpu.so", "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13"};
  EXPECT_EQ(other_libtorch_folders(loaded, "/opt/torch/lib/libc10.so"),
            std::vector<std::string>{"/usr/lib/x86_64-linux-gnu"});
}

TEST(OneLibtorch, ThisProcessHasOne) {
  const auto own = ddp::compat::own_libc10_file();
  ASSERT_FALSE(own.empty());
  const auto loaded = ddp::compat::loaded_libtorch_files();
  EXPECT_NE(std::find(loaded.begin(), loaded.end(), own), loaded.end()) << own;
  EXPECT_TRUE(other_libtorch_folders(loaded, own).empty());
  EXPECT_NO_THROW(ddp::compat::check_one_libtorch());
}

}  // namespace
