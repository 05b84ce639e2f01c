// Recording into the ring (ring.h) and reading it back: what ProcessGroup,
// Work and DDP call (recorder.h), and the public flight_records() and
// dump_flight_recorder() (include/ddp/flight_recorder.h).
#include "flight/recorder.h"

#include <ddp/errors.h>
#include <ddp/flight_recorder.h>

#include "base/env.h"
#include "flight/ring.h"

#include <c10/core/ScalarType.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iostream>

namespace ddp::detail::flight {
namespace {

// Initial-exec: read without a call into the dynamic loader. libddp is
// linked, not dlopen'ed; were it dlopen'ed, glibc's static TLS surplus
// holds these 12 bytes.
__attribute__((tls_model("initial-exec"))) thread_local int current_bucket = -1;

constexpr long kDefaultCapacity = 4096;

void copy_name(char* to, size_t size, const std::string& from) {
  size_t n = std::min(from.size(), size - 1);
  for (size_t i = 0; i < n; ++i) to[i] = from[i] == ' ' ? '_' : from[i];  // names hold no spaces
  to[n] = '\0';
}

Recorder* make_recorder() {
  auto* r = new Recorder;
  const auto wanted = static_cast<uint64_t>(
      env_int("DDP_FLIGHT_RECORDER_SIZE", 0, 1 << 24).value_or(kDefaultCapacity));
  if (wanted > 0) {
    r->capacity = 1;
    while (r->capacity < wanted) r->capacity <<= 1;
    r->slots.reset(new Slot[r->capacity]);
  }
  r->origin_ticks = now_ticks();
  r->origin_ns = steady_ns();
  char host[sizeof(r->host)] = {};
  copy_name(r->host, sizeof(r->host), gethostname(host, sizeof(host) - 1) == 0 ? host : "?");
  if (auto rank = env_int("RANK", 0, 1 << 24)) r->rank = static_cast<int>(*rank);
  if (auto dir = env_string("DDP_FLIGHT_RECORDER_DIR"); dir && !dir->empty()) {
    if (dir->size() >= sizeof(r->dir)) {
      std::cerr << "ddp: flight recorder: DDP_FLIGHT_RECORDER_DIR is longer than "
                << sizeof(r->dir) - 1 << " bytes; no dumps will be written\n";
    } else {
      std::strcpy(r->dir, dir->c_str());  // as it is: spaces too
    }
  }
  return r;
}

}  // namespace

__attribute__((tls_model("initial-exec"))) thread_local uint64_t pending_record = 0;

Recorder& recorder() {
  static Recorder* instance = [] {
    Recorder* r = make_recorder();
    // After the recorder exists: the handlers reach it without recorder().
    if (r->capacity > 0 && r->dir[0] != '\0') install_signal_handlers(r);
    return r;
  }();
  return *instance;
}

int64_t ticks_to_ns(const Recorder& r, int64_t ticks, int64_t now_ticks, int64_t now_ns) {
  if (ticks == 0) return 0;
  if (now_ticks == r.origin_ticks) return r.origin_ns;
  const double ns_per_tick =
      static_cast<double>(now_ns - r.origin_ns) / static_cast<double>(now_ticks - r.origin_ticks);
  return r.origin_ns +
         static_cast<int64_t>(static_cast<double>(ticks - r.origin_ticks) * ns_per_tick);
}

namespace {

std::atomic<const char* (*)(uint8_t)> kind_namer{nullptr};
std::atomic<const char* (*)(int8_t)> op_namer{nullptr};

}  // namespace

void name_codes(CodeNames names) {
  kind_namer.store(names.kind, std::memory_order_release);
  op_namer.store(names.op, std::memory_order_release);
}

const char* kind_name(uint8_t kind) {
  const auto name = kind_namer.load(std::memory_order_acquire);
  return name ? name(kind) : "?";
}
const char* op_name(int8_t op) {
  const auto name = op_namer.load(std::memory_order_acquire);
  return op < 0 ? "-" : name ? name(op) : "?";
}
const char* dtype_name(int8_t dtype) {
  return dtype >= 0 ? c10::toString(static_cast<c10::ScalarType>(dtype)) : "-";
}

bool read_slot(const Recorder& r, uint64_t index, RecordCopy& out) {
  const Slot& s = r.slot(index);
  const uint64_t id = s.id.load(std::memory_order_acquire);
  if (id != index + 1) return false;
  out.id = id;
  out.seq = s.seq.load(std::memory_order_relaxed);
  out.count = s.count.load(std::memory_order_relaxed);
  out.issued_ticks = s.issued_ticks.load(std::memory_order_relaxed);
  out.started_ticks = s.started_ticks.load(std::memory_order_relaxed);
  out.ended_ns = s.ended_ns.load(std::memory_order_relaxed);
  // The state first: a start or completion stores its time before its state.
  out.state = s.state.load(std::memory_order_acquire);
  out.root = s.root.load(std::memory_order_relaxed);
  out.bucket = s.bucket.load(std::memory_order_relaxed);
  out.group = s.group.load(std::memory_order_relaxed);
  out.kind = s.kind.load(std::memory_order_relaxed);
  out.op = s.op.load(std::memory_order_relaxed);
  out.dtype = s.dtype.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  return s.id.load(std::memory_order_relaxed) == id;
}

bool recording() { return recorder().capacity > 0; }

int add_group(const std::string& name, int rank, int size, const std::string& backend) {
  Recorder& r = recorder();
  if (r.capacity == 0) return -1;
  const int index = r.group_count.fetch_add(1);
  if (index >= kMaxGroups) {
    if (index == kMaxGroups) {
      std::cerr << "ddp: flight recorder: more than " << kMaxGroups
                << " groups; later ones are not recorded\n";
    }
    return -1;
  }
  GroupEntry& g = r.groups[index];
  copy_name(g.name, sizeof(g.name), name);
  copy_name(g.backend, sizeof(g.backend), backend);
  g.rank = rank;
  g.size = size;
  g.ready.store(true, std::memory_order_release);
  int unknown = -1;
  r.rank.compare_exchange_strong(unknown, rank);  // the first group names the process
  return index;
}

uint64_t issue(const Issue& c) {
  Recorder& r = recorder();
  const uint64_t index = r.next.fetch_add(1, std::memory_order_relaxed);
  Slot& s = r.slot(index);
  s.id.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s.seq.store(c.seq, std::memory_order_relaxed);
  s.count.store(c.count, std::memory_order_relaxed);
  s.issued_ticks.store(c.issued_ticks, std::memory_order_relaxed);
  s.started_ticks.store(0, std::memory_order_relaxed);
  s.ended_ns.store(0, std::memory_order_relaxed);
  s.root.store(c.root, std::memory_order_relaxed);
  s.bucket.store(current_bucket, std::memory_order_relaxed);
  s.group.store(static_cast<int16_t>(c.group), std::memory_order_relaxed);
  s.kind.store(c.kind, std::memory_order_relaxed);
  s.op.store(c.op, std::memory_order_relaxed);
  s.dtype.store(c.dtype, std::memory_order_relaxed);
  s.state.store(static_cast<uint8_t>(FlightState::QUEUED), std::memory_order_relaxed);
  s.id.store(index + 1, std::memory_order_release);
  return index + 1;
}

void started(uint64_t record, int64_t ticks) {
  Recorder& r = recorder();
  Slot& s = r.slot(record - 1);
  if (s.id.load(std::memory_order_acquire) != record) return;  // overwritten since
  // A plain store: a collective's start is recorded before its completion,
  // on the same thread (the backend's worker) or ahead of it (settle()).
  s.started_ticks.store(ticks, std::memory_order_relaxed);
  s.state.store(static_cast<uint8_t>(FlightState::STARTED), std::memory_order_release);
}

void finished(uint64_t record, const std::exception_ptr& error, int64_t ended_ns) {
  Recorder& r = recorder();
  Slot& s = r.slot(record - 1);
  if (s.id.load(std::memory_order_acquire) == record) {
    s.ended_ns.store(ended_ns, std::memory_order_relaxed);
    s.state.store(static_cast<uint8_t>(error ? FlightState::FAILED : FlightState::COMPLETED),
                  std::memory_order_release);
  }
  if (!error) return;
  std::string what = "unknown error";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {}
  dump_after_failure(what);
}

void dump_after_error(const std::string& reason) {
  Recorder& r = recorder();
  if (r.capacity == 0 || r.dir[0] == '\0') return;
  char path[kPathSize];
  if (int err = write_dump(r, r.dir, reason.c_str(), path, sizeof(path))) {
    std::cerr << "ddp: flight recorder: cannot write " << path << ": " << std::strerror(err)
              << " (DDP_FLIGHT_RECORDER_DIR); the error it was to record follows\n";
  }
}

void dump_after_failure(const std::string& what) {
  if (!recorder().failure_dumped.exchange(true)) dump_after_error("collective failed: " + what);
}

void PendingRecord::fail_unclaimed(uint64_t record) {
  Recorder& r = recorder();
  Slot& s = r.slot(record - 1);
  if (s.id.load(std::memory_order_acquire) == record) {
    s.ended_ns.store(steady_ns(), std::memory_order_relaxed);
    s.state.store(static_cast<uint8_t>(FlightState::FAILED), std::memory_order_release);
  }
  dump_after_failure("the backend threw while issuing it");
}

BucketScope::BucketScope(int bucket) : previous_(current_bucket) { current_bucket = bucket; }
BucketScope::~BucketScope() { current_bucket = previous_; }

}  // namespace ddp::detail::flight

namespace ddp {

std::vector<FlightRecord> flight_records() {
  using namespace detail::flight;
  const Recorder& r = recorder();
  std::vector<FlightRecord> records;
  const int64_t ticks_now = now_ticks(), ns_now = steady_ns();
  for_each_record(r, kMaxGroups, [&](const RecordCopy& c) {
    const GroupEntry& g = r.groups[c.group];
    if (!g.ready.load(std::memory_order_acquire)) return 0;
    FlightRecord f;
    f.seq = c.seq;
    f.group = g.name;
    f.group_rank = g.rank;
    f.group_size = g.size;
    f.backend = g.backend;
    f.kind = kind_name(c.kind);
    f.op = op_name(c.op);
    f.dtype = dtype_name(c.dtype);
    f.count = c.count;
    f.root = c.root;
    f.bucket = c.bucket;
    f.state = static_cast<FlightState>(c.state);
    f.issued_ns = ticks_to_ns(r, c.issued_ticks, ticks_now, ns_now);
    f.started_ns = ticks_to_ns(r, c.started_ticks, ticks_now, ns_now);
    f.ended_ns = c.ended_ns;
    records.push_back(std::move(f));
    return 0;
  });
  return records;
}

std::string dump_flight_recorder(const std::string& reason, const std::string& dir) {
  using namespace detail::flight;
  const Recorder& r = recorder();
  const std::string where = dir.empty() ? std::string(r.dir) : dir;
  if (where.empty()) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "dump_flight_recorder", {}},
                          "no directory given and DDP_FLIGHT_RECORDER_DIR is not set");
  }
  char path[kPathSize];
  if (int err = write_dump(r, where.c_str(), reason.c_str(), path, sizeof(path))) {
    throw Error(ErrorContext{-1, 0, "", "dump_flight_recorder", {}},
                std::string("cannot write ") + path + ": " + std::strerror(err) +
                    "; choose a directory this process can write");
  }
  return path;
}

}  // namespace ddp
