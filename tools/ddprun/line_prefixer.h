#pragma once

#include <cstddef>
#include <string>

namespace ddprun {

// Turns one rank's raw output stream into whole, prefixed lines written to
// `out_fd`. Each write() carries only whole lines, so lines of different
// ranks (all written by ddprun's single thread) never mix mid-line.
class LinePrefixer {
 public:
  LinePrefixer(std::string prefix, int out_fd);

  // Buffers `data`; writes every line completed by it, each with the prefix.
  void feed(const char* data, std::size_t size);

  // Writes a pending partial line (prefixed, newline added). Call at EOF.
  void finish();

 private:
  std::string prefix_;
  int out_fd_;
  std::string pending_;  // bytes after the last newline seen
};

// write() until all of `data` is out, retrying EINTR and waiting (bounded)
// on a non-blocking descriptor. Returns false if the output is gone (e.g.
// EPIPE); the caller then drops the data.
bool write_all(int fd, const char* data, std::size_t size);

}  // namespace ddprun
