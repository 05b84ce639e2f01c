#include "fashion_mnist.h"

#include <zlib.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

namespace train {
namespace {

// One of the four files: its name (without .gz), its MNIST magic number and
// how many samples it must hold.
struct FileSpec {
  const char* name;
  uint32_t magic;  // 2051: images (then count, rows, cols), 2049: labels (then count)
  uint32_t count;
};

constexpr FileSpec kFiles[] = {
    {"train-images-idx3-ubyte", 2051, 60000},
    {"train-labels-idx1-ubyte", 2049, 60000},
    {"t10k-images-idx3-ubyte", 2051, 10000},
    {"t10k-labels-idx1-ubyte", 2049, 10000},
};
constexpr uint32_t kSide = 28;
constexpr const char* kReinstall =
    "reinstall it (apt-get install --reinstall dataset-fashion-mnist), or train on "
    "synthetic data (--data synthetic)";

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

void make_dirs(const std::string& path) {
  for (size_t at = path.find('/', 1);; at = path.find('/', at + 1)) {
    const std::string prefix = path.substr(0, at);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      throw DataError("cannot create the data cache " + prefix + ": " + std::strerror(errno) +
                      "; set XDG_CACHE_HOME to a writable directory");
    }
    if (at == std::string::npos) return;
  }
}

std::string cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/ddp/fashion-mnist";
  }
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/ddp/fashion-mnist";
}

uint32_t big_endian(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// Why `bytes` are not `spec`'s file; "" when they are.
std::string format_problem(const std::vector<unsigned char>& bytes, const FileSpec& spec) {
  const bool images = spec.magic == 2051;
  const size_t header = images ? 16 : 8;
  const size_t want = header + size_t{spec.count} * (images ? kSide * kSide : 1);
  if (bytes.size() < header) {
    return "it holds " + std::to_string(bytes.size()) + " bytes, less than an MNIST header";
  }
  if (big_endian(bytes.data()) != spec.magic) {
    return "its magic number is " + std::to_string(big_endian(bytes.data())) + ", not " +
           std::to_string(spec.magic) + " (MNIST " + (images ? "images" : "labels") + ")";
  }
  if (big_endian(bytes.data() + 4) != spec.count) {
    return "it announces " + std::to_string(big_endian(bytes.data() + 4)) + " samples, not " +
           std::to_string(spec.count);
  }
  if (images && (big_endian(bytes.data() + 8) != kSide || big_endian(bytes.data() + 12) != kSide)) {
    return "its images are not 28 x 28";
  }
  if (bytes.size() != want) {
    return "it holds " + std::to_string(bytes.size()) + " bytes, not " + std::to_string(want) +
           " (truncated or padded)";
  }
  return "";
}

std::vector<unsigned char> gunzip(const std::string& path) {
  gzFile in = gzopen(path.c_str(), "rb");
  if (!in) throw DataError("cannot open " + path + ": " + std::strerror(errno));
  std::vector<unsigned char> out;
  unsigned char buffer[1 << 16];
  for (;;) {
    const int n = gzread(in, buffer, sizeof(buffer));
    if (n < 0) {
      int code = 0;
      const std::string why = gzerror(in, &code);
      gzclose(in);
      throw DataError(path + " is corrupt (zlib: " + why + "); " + kReinstall);
    }
    if (n == 0) break;
    out.insert(out.end(), buffer, buffer + n);
  }
  // gzread stops quietly at a cut-off stream; gzclose_r then says so.
  if (int code = gzclose_r(in); code != Z_OK) {
    throw DataError(path + " is truncated or corrupt (zlib error " + std::to_string(code) + "); " +
                    kReinstall);
  }
  return out;
}

std::vector<unsigned char> read_file(const std::string& path) {
  std::vector<unsigned char> bytes;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    unsigned char buffer[1 << 16];
    for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), f)) > 0;) {
      bytes.insert(bytes.end(), buffer, buffer + n);
    }
    std::fclose(f);
  }
  return bytes;
}

// Writes `bytes` to `path` through a name of this process's own, then
// renames it into place.
void write_atomically(const std::string& path, const std::vector<unsigned char>& bytes) {
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);  // ranks of other hosts may share the cache (NFS)
  const std::string tmp = path + ".tmp." + host + "." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  bool ok = f && std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = f && std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw DataError("cannot write " + path + ": " + why +
                    "; free space there or set XDG_CACHE_HOME elsewhere");
  }
}

}  // namespace

std::optional<std::string> unpack_fashion_mnist(const std::string& source_dir) {
  std::vector<std::string> missing;
  for (const FileSpec& spec : kFiles) {
    if (!exists(source_dir + "/" + spec.name + ".gz")) missing.push_back(spec.name);
  }
  if (missing.size() == std::size(kFiles)) return std::nullopt;
  if (!missing.empty()) {
    throw DataError(source_dir + "/" + missing.front() + ".gz is missing (" +
                    std::to_string(missing.size()) + " of the 4 files are); " + kReinstall);
  }
  const std::string dir = cache_dir();
  make_dirs(dir);
  for (const FileSpec& spec : kFiles) {
    const std::string cached = dir + "/" + spec.name;
    if (exists(cached) && format_problem(read_file(cached), spec).empty()) continue;
    const std::string zipped = source_dir + "/" + spec.name + ".gz";
    const std::vector<unsigned char> bytes = gunzip(zipped);
    if (std::string why = format_problem(bytes, spec); !why.empty()) {
      throw DataError(zipped + " is not Fashion-MNIST's " + spec.name + ": " + why + "; " +
                      kReinstall);
    }
    write_atomically(cached, bytes);
  }
  return dir;
}

}  // namespace train
