// A fresh directory under /tmp for one test, removed with everything in it
// when the object goes (a failed assertion included). Removed by `rm -rf`,
// not std::filesystem: pip's libtorch exports its own copy of
// std::filesystem::remove_all, which a test binary then calls and crashes
// in.
#pragma once

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddp::testing {

class ScratchDir {
 public:
  // /tmp/<prefix>.XXXXXX; std::runtime_error when it cannot be made.
  explicit ScratchDir(const std::string& prefix) {
    std::string tmpl = "/tmp/" + prefix + ".XXXXXX";
    std::vector<char> name(tmpl.begin(), tmpl.end());
    name.push_back('\0');
    if (!mkdtemp(name.data())) throw std::runtime_error("cannot make " + tmpl);
    path_ = name.data();
  }
  ~ScratchDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ddp::testing
