// Exits 0 when libtorch sees a GPU, 1 otherwise (skip_without_gpu.sh).
#include <torch/cuda.h>

#include <iostream>

int main() {
  const bool available = torch::cuda::is_available();
  std::cout << "gpu_probe: " << static_cast<int>(torch::cuda::device_count()) << " GPU(s) visible"
            << std::endl;
  return available ? 0 : 1;
}
