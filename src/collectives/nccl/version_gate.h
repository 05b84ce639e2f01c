// What the NCCL a process loaded allows, decided from version codes and the
// environment alone (no CUDA or NCCL header), so that every build tests it:
// - ranks sharing a GPU: NCCL 2.30 and later run several ranks on one GPU
//   when NCCL_MULTI_RANK_GPU_ENABLE=1 is set; earlier NCCLs, or 2.30 without
//   the variable, refuse them, and ddp refuses first, naming both ranks;
// - the loaded library against the headers ddp was compiled with: a process
//   loads one libnccl.so.2, the first one the loader finds (LD_PRELOAD, then
//   whichever of ddp and libtorch asks first), which may not be the one
//   found at build time.
#pragma once

#include <string>

namespace ddp::detail::nccl {

// NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z, NCCL's version code since 2.9.
constexpr int version_code(int major, int minor, int patch) {
  return major * 10000 + minor * 100 + patch;
}
// The first NCCL that runs several ranks on one GPU (with the variable below).
constexpr int kMultiRankGpuVersion = version_code(2, 30, 0);
constexpr const char* kMultiRankGpuVariable = "NCCL_MULTI_RANK_GPU_ENABLE";

// "2.30.7" for 23007.
std::string version_text(int code);

// "" when ranks may share a GPU under NCCL `loaded_code`, with
// NCCL_MULTI_RANK_GPU_ENABLE's value `variable` (nullptr: unset); else why
// not and what would allow it, naming the variable and the NCCL version.
std::string shared_gpu_refusal(int loaded_code, const char* variable);

// "" when the loaded NCCL (`loaded_code`, from `loaded_path`) serves code
// compiled against NCCL `header_code`'s headers: the same major version and
// no older (NCCL keeps its ABI within a major version, adding to it). Else
// both versions, where the loaded one came from, and how to load another.
std::string loaded_version_mismatch(int loaded_code, const std::string& loaded_path,
                                    int header_code);

}  // namespace ddp::detail::nccl
