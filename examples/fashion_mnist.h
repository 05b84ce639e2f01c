// Fashion-MNIST for the main job: Debian's dataset-fashion-mnist installs the
// four gzipped MNIST-format files in /usr/share/datasets/fashion-mnist. They
// are unzipped once into a cache (each file written under a temporary name
// and renamed, so that ranks unzipping at once, or a run killed half-way,
// never leave a partial file), checked, and then read by libtorch's MNIST
// reader (torch::data::datasets::MNIST), which needs them unzipped.
//
//   if (auto dir = train::unpack_fashion_mnist("/usr/share/datasets/fashion-mnist"))
//     torch::data::datasets::MNIST data(*dir);
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

namespace train {

// Where Debian's dataset-fashion-mnist puts the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Fashion-MNIST's mean and standard deviation of a pixel (in [0, 1]) over
// its training set, for normalising.
inline constexpr double kFashionMnistMean = 0.2860, kFashionMnistStd = 0.3530;

// A data file that is missing, truncated or corrupt; what() names the file
// and what to do.
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The directory of the four unzipped files, in the cache
// ($XDG_CACHE_HOME/ddp/fashion-mnist, else ~/.cache/ddp/fashion-mnist);
// std::nullopt when `source_dir` holds none of the four .gz files (the
// package is not installed). Throws DataError when some are missing, or a
// file (zipped or cached) is truncated or corrupt: each file's header and
// size are checked against the MNIST format and the split's sample count.
std::optional<std::string> unpack_fashion_mnist(const std::string& source_dir);

}  // namespace train
