#include "checkpoint/checkpoint_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace ddp::checkpoint_detail {
namespace {

constexpr char kMagic[8] = {'D', 'D', 'P', 'C', 'K', 'P', 'T', '\n'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 32;  // magic, version, reserved, size, hash

// FNV-1a over 64-bit words (then the tail bytes): any change of the payload
// shows, at memory speed rather than byte-at-a-time FNV's.
uint64_t payload_hash(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  constexpr uint64_t kPrime = 0x100000001b3ULL;
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + i, 8);
    h = (h ^ word) * kPrime;
  }
  for (; i < bytes.size(); ++i) h = (h ^ static_cast<unsigned char>(bytes[i])) * kPrime;
  return h;
}

// Little-endian on disk, whatever the host.
void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}
uint64_t get_le(const std::string& in, size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= static_cast<uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  }
  return value;
}

std::string os_error(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

// Closes on scope exit; the error of an explicit close() is the caller's.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() {
    const int out = fd;
    fd = -1;
    return out;
  }
};

void write_all(int fd, const char* data, size_t size, const std::string& tmp) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(os_error("cannot write", tmp));
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

std::string directory_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

FileRead read_checkpoint_file(const std::string& path) {
  FileRead out;
  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) {
    if (errno == ENOENT) return out;  // kMissing: nothing to resume
    out.status = FileRead::Status::kError;
    out.error = os_error("cannot open", path);
    return out;
  }
  struct stat info {};
  if (::fstat(file.fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    out.status = FileRead::Status::kError;
    out.error = S_ISDIR(info.st_mode) ? "'" + path + "' is a directory, not a checkpoint file"
                                      : os_error("cannot read", path);
    return out;
  }
  std::string bytes(static_cast<size_t>(info.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(file.fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      out.status = FileRead::Status::kError;
      out.error = os_error("cannot read", path);
      return out;
    }
    if (n == 0) break;  // shrank while we read: the checks below say so
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);

  out.status = FileRead::Status::kError;
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    out.error = "'" + path + "' is not a ddp checkpoint (no DDPCKPT header; " +
                std::to_string(bytes.size()) + " bytes)";
    return out;
  }
  if (bytes.size() < kHeaderBytes) {
    out.error = "'" + path + "' is truncated: " + std::to_string(bytes.size()) +
                " bytes, less than its header";
    return out;
  }
  const uint64_t version = get_le(bytes, 8, 4);
  if (version != kVersion) {
    out.error = "'" + path + "' has checkpoint format " + std::to_string(version) +
                "; this ddp reads format " + std::to_string(kVersion);
    return out;
  }
  const uint64_t size = get_le(bytes, 16, 8), hash = get_le(bytes, 24, 8);
  if (bytes.size() - kHeaderBytes != size) {
    out.error = "'" + path + "' is truncated or damaged: its header announces " +
                std::to_string(size) + " bytes of data, the file holds " +
                std::to_string(bytes.size() - kHeaderBytes);
    return out;
  }
  out.payload = bytes.substr(kHeaderBytes);
  if (payload_hash(out.payload) != hash) {
    out.payload.clear();
    out.error = "'" + path + "' is corrupt: its data does not match the hash in its header";
    return out;
  }
  out.status = FileRead::Status::kOk;
  return out;
}

void write_checkpoint_file(const std::string& path, const std::string& payload) {
  std::string header(kMagic, sizeof(kMagic));
  put_le(header, kVersion, 4);
  put_le(header, 0, 4);
  put_le(header, payload.size(), 8);
  put_le(header, payload_hash(payload), 8);

  const std::string tmp = path + ".tmp";
  Fd file{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (file.fd < 0) throw std::runtime_error(os_error("cannot create", tmp));
  try {
    write_all(file.fd, header.data(), header.size(), tmp);
    write_all(file.fd, payload.data(), payload.size(), tmp);
    if (::fsync(file.fd) != 0) throw std::runtime_error(os_error("cannot fsync", tmp));
    if (::close(file.release()) != 0) throw std::runtime_error(os_error("cannot close", tmp));
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      throw std::runtime_error(os_error("cannot rename '" + tmp + "' to", path));
    }
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  // The rename is durable only once the directory is: without this, a power
  // loss could bring back the old file (or none) after save returned.
  const std::string dir = directory_of(path);
  Fd directory{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (directory.fd < 0 || ::fsync(directory.fd) != 0) {
    throw std::runtime_error(os_error("cannot fsync the directory", dir));
  }
}

}  // namespace ddp::checkpoint_detail
