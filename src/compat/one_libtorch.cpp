#include "compat/one_libtorch.h"

#include <ddp/errors.h>

#include <c10/core/CPUAllocator.h>

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>

#include <algorithm>
#include <memory>

namespace ddp::compat {
namespace {

std::string real_path(const char* path) {
  std::unique_ptr<char, decltype(&free)> resolved(realpath(path, nullptr), &free);
  return resolved ? std::string(resolved.get()) : std::string(path);
}

std::string folder_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// libc10.so* and libtorch_cpu.so*, not libc10_cuda.so: one of each per libtorch.
bool is_libtorch_core(const std::string& path) {
  const auto name = path.substr(path.rfind('/') + 1);
  return starts_with(name, "libc10.so") || starts_with(name, "libtorch_cpu.so");
}

int collect(dl_phdr_info* info, size_t, void* out) {
  if (info->dlpi_name && *info->dlpi_name && is_libtorch_core(info->dlpi_name)) {
    static_cast<std::vector<std::string>*>(out)->push_back(real_path(info->dlpi_name));
  }
  return 0;
}

}  // namespace

std::vector<std::string> loaded_libtorch_files() {
  std::vector<std::string> files;
  dl_iterate_phdr(collect, &files);
  return files;
}

std::string own_libc10_file() {
  Dl_info info{};
  // A c10 function libddp calls: its address, taken here, is the definition
  // the dynamic linker bound libddp to.
  if (dladdr(reinterpret_cast<void*>(&c10::GetCPUAllocator), &info) == 0 || !info.dli_fname) {
    return "";
  }
  return real_path(info.dli_fname);
}

std::vector<std::string> other_libtorch_folders(const std::vector<std::string>& files,
                                                const std::string& own) {
  const auto own_folder = folder_of(own);
  std::vector<std::string> others;
  for (const auto& file : files) {
    const auto folder = folder_of(file);
    if (folder != own_folder && std::find(others.begin(), others.end(), folder) == others.end()) {
      others.push_back(folder);
    }
  }
  return others;
}

void check_one_libtorch() {
  static const std::string problem = [] {
    const auto own = own_libc10_file();
    if (own.empty()) return std::string();  // not knowable: nothing to compare with
    const auto files = loaded_libtorch_files();
    const auto others = other_libtorch_folders(files, own);
    if (others.empty()) return std::string();
    std::string listed;
    for (const auto& folder : others) listed += (listed.empty() ? "" : ", ") + folder;
    return "this process has loaded two libtorchs: libddp's, in " + folder_of(own) +
           ", and another in " + listed +
           "; a tensor that crosses from one to the other crashes the program";
  }();
  if (!problem.empty()) {
    throw InvalidArgument(
        ErrorContext{-1, 0, "", "libtorch", {}}, problem,
        "Keep one libtorch in the process: build the program against libddp's (CMake's "
        "find_package(ddp) finds it), load no plugin or extension built against another, or "
        "rebuild ddp against the program's; `ldd PROGRAM | grep -E 'c10|torch'` lists what it "
        "links.");
  }
}

}  // namespace ddp::compat
