// The checkpoint file on rank 0's disk: a 32-byte header (magic, format
// version, payload size, payload hash) and the payload (a libtorch archive).
// The header is what tells a truncated or corrupt file from a good one with a
// message naming the path; libtorch's own archive reader would fail deep in
// its zip code, or not at all for a flipped bit inside a tensor.
#pragma once

#include <string>

namespace ddp::checkpoint_detail {

struct FileRead {
  enum class Status { kMissing, kOk, kError };
  Status status = Status::kMissing;
  std::string payload;  // kOk: the archive bytes
  std::string error;    // kError: what went wrong, naming the path
};

// Reads and checks the file at `path`. No file there is kMissing; a file
// that cannot be read, is not a ddp checkpoint, is truncated or does not
// match its hash is kError.
FileRead read_checkpoint_file(const std::string& path);

// Writes `payload` to `path` so that a crash at any point leaves either the
// old file or the new one: `path`.tmp, fsync, rename, fsync of the directory.
// Throws std::runtime_error naming the path, the step and the OS's reason;
// the temporary file is removed then.
void write_checkpoint_file(const std::string& path, const std::string& payload);

}  // namespace ddp::checkpoint_detail
