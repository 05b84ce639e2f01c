#include "collectives/shm/segment.h"

#include <ddp/errors.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>
#include <sstream>
#include <utility>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ddp::detail::shm {
namespace {

size_t control_offset() { return sizeof(Header); }

size_t descriptor_offset(int world) {
  return control_offset() + sizeof(RankControl) * static_cast<size_t>(world);
}

size_t data_offset(int world, int slots) {
  size_t end = descriptor_offset(world) +
               sizeof(OpDescriptor) * static_cast<size_t>(world) * static_cast<size_t>(slots);
  return (end + 4095) / 4096 * 4096;
}

// The context of the segment's errors: no rank at hand, operation "shm".
ErrorContext shm_context() { return ErrorContext{-1, 0, "", "shm", {}}; }

[[noreturn]] void fail(const std::string& call, const std::string& name, int err) {
  throw CommunicationError(shm_context(), call + "(" + name + ") failed: " + std::strerror(err) +
                                              (err == ENOSPC || err == ENOMEM
                                                   ? ". /dev/shm is full or too small: free it, "
                                                     "or lower ShmOptions::slots or chunk_bytes"
                                                   : ""));
}

// Maps `fd` (`bytes` long) shared, prefaulted: the first collective then
// pays no page faults.
void* map(int fd, size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(fd);
    fail("mmap", name, err);
  }
  close(fd);  // the mapping keeps the memory; the descriptor is not needed
  return p;
}

}  // namespace

size_t Segment::size_for(int world, int slots, int64_t chunk_bytes) {
  return data_offset(world, slots) +
         static_cast<size_t>(world) * static_cast<size_t>(slots) * static_cast<size_t>(chunk_bytes);
}

void* create_mapping(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) fail("shm_open", name, errno);
  // posix_fallocate reserves the pages now, so a full /dev/shm is an error
  // here rather than a SIGBUS in the middle of a collective.
  if (int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
    close(fd);
    shm_unlink(name.c_str());
    fail("posix_fallocate", name, err);
  }
  try {
    return map(fd, bytes, name);
  } catch (...) {
    shm_unlink(name.c_str());
    throw;
  }
}

void* open_mapping(const std::string& name, size_t bytes, const std::string& on_size_mismatch) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) fail("shm_open", name, errno);
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    throw InvalidArgument(shm_context(), "segment " + name + " has " + std::to_string(st.st_size) +
                                             " bytes, expected " + std::to_string(bytes) + ": " +
                                             on_size_mismatch);
  }
  return map(fd, bytes, name);
}

namespace {

// This process's PID namespace as digits (its inode), "0" where unknown.
std::string pid_namespace_tag() {
  struct stat st {};
  if (stat("/proc/self/ns/pid", &st) != 0) return "0";
  return std::to_string(static_cast<unsigned long long>(st.st_ino));
}

// Removes the names of segments whose creator, in this PID namespace, is
// dead: a process killed between creating a segment and the last peer's
// mapping of it (the one window where nobody is left to remove the name).
// Memory that live peers still map stays theirs; only the name goes.
void remove_orphaned_names(const std::string& namespace_tag) {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  while (const dirent* entry = readdir(dir)) {
    int pid = 0, used = 0;
    const char* name = entry->d_name;
    if (std::sscanf(name, "ddp-shm-%d-%n", &pid, &used) != 1 || used == 0 || pid <= 0) continue;
    const std::string rest = name + used;
    if (rest.compare(0, namespace_tag.size() + 1, namespace_tag + "-") != 0) continue;
    if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
    shm_unlink(("/" + std::string(name)).c_str());
  }
  closedir(dir);
}

}  // namespace

std::string fresh_segment_name() {
  const std::string tag = pid_namespace_tag();
  remove_orphaned_names(tag);
  std::random_device rd;
  std::ostringstream name;
  name << "/ddp-shm-" << getpid() << "-" << tag << "-" << std::hex << rd() << rd() << rd();
  return name.str();
}

Segment Segment::create(const std::string& name, int world, int slots, int64_t chunk_bytes) {
  const size_t bytes = size_for(world, slots, chunk_bytes);
  void* base = create_mapping(name, bytes);
  Segment s(base, bytes);
  auto* h = new (base) Header();
  h->magic = kMagic;
  h->world = static_cast<uint32_t>(world);
  h->slots = static_cast<uint32_t>(slots);
  h->chunk_bytes = static_cast<uint64_t>(chunk_bytes);
  for (int r = 0; r < world; ++r) {
    new (&s.control(r)) RankControl();
    for (int k = 0; k < slots; ++k) new (&s.descriptor(r, k)) OpDescriptor();
  }
  return s;
}

Segment Segment::open(const std::string& name, int world, int slots, int64_t chunk_bytes) {
  const size_t bytes = size_for(world, slots, chunk_bytes);
  Segment s(open_mapping(name, bytes,
                         "the ranks disagree on the world size or ShmOptions (slots, "
                         "chunk_bytes); give every rank the same"),
            bytes);
  const Header& h = s.header();
  if (h.magic != kMagic || h.world != static_cast<uint32_t>(world) ||
      h.slots != static_cast<uint32_t>(slots) ||
      h.chunk_bytes != static_cast<uint64_t>(chunk_bytes)) {
    throw InvalidArgument(
        shm_context(), "segment " + name + " was made for world " + std::to_string(h.world) + ", " +
                           std::to_string(h.slots) + " slots of " + std::to_string(h.chunk_bytes) +
                           " bytes; this rank expects world " + std::to_string(world) + ", " +
                           std::to_string(slots) + " slots of " + std::to_string(chunk_bytes) +
                           ": give every rank the same ShmOptions");
  }
  return s;
}

bool Segment::unlink(const std::string& name) { return shm_unlink(name.c_str()) == 0; }

Segment::Segment(Segment&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    if (base_) munmap(base_, bytes_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Segment::~Segment() {
  if (base_) munmap(base_, bytes_);
}

RankControl& Segment::control(int rank) const {
  return reinterpret_cast<RankControl*>(static_cast<char*>(base_) + control_offset())[rank];
}

char* Segment::slot(int rank, int slot) const {
  const auto& h = header();
  return static_cast<char*>(base_) +
         data_offset(static_cast<int>(h.world), static_cast<int>(h.slots)) +
         (static_cast<size_t>(rank) * h.slots + static_cast<size_t>(slot)) * h.chunk_bytes;
}

OpDescriptor& Segment::descriptor(int rank, int slot) const {
  const auto& h = header();
  return reinterpret_cast<OpDescriptor*>(static_cast<char*>(base_) + descriptor_offset(
                                             static_cast<int>(h.world)))[static_cast<size_t>(rank) *
                                                                             h.slots +
                                                                         static_cast<size_t>(slot)];
}

}  // namespace ddp::detail::shm
