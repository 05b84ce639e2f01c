#include "collectives/nccl/version_gate.h"

#include <string>

namespace ddp::detail::nccl {

std::string version_text(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

std::string shared_gpu_refusal(int loaded_code, const char* variable) {
  const std::string loaded = "NCCL " + version_text(loaded_code);
  const bool set = variable != nullptr && std::string(variable) == "1";
  if (loaded_code >= kMultiRankGpuVersion && set) return "";
  std::string why;
  if (loaded_code < kMultiRankGpuVersion) {
    why = loaded + " needs a GPU per rank; NCCL " + version_text(kMultiRankGpuVersion) +
          " and later accept ranks sharing one with " + kMultiRankGpuVariable +
          "=1 (load it with LD_PRELOAD; scripts/build-nccl.sh builds one)";
  } else {
    why = loaded + " accepts ranks sharing a GPU only with " + kMultiRankGpuVariable + "=1 (it is " +
          (variable == nullptr ? std::string("unset") : "\"" + std::string(variable) + "\"") +
          "); set it on every rank";
  }
  return why + ", or give each rank its own GPU (NcclOptions::device, LOCAL_RANK). Ranks "
               "sharing a GPU can also use shm, which stages CUDA tensors through host memory";
}

std::string loaded_version_mismatch(int loaded_code, const std::string& loaded_path,
                                    int header_code) {
  if (loaded_code / 10000 == header_code / 10000 && loaded_code >= header_code) return "";
  return "this process loaded NCCL " + version_text(loaded_code) + " (" + loaded_path +
         ") but ddp was compiled against NCCL " + version_text(header_code) +
         "'s headers, which it needs " +
         (loaded_code / 10000 != header_code / 10000 ? "in the same major version"
                                                     : "or a later one") +
         "; a process loads one libnccl.so.2, the first the loader finds: LD_PRELOAD the "
         "right one, or rebuild ddp against the NCCL it will load";
}

}  // namespace ddp::detail::nccl
