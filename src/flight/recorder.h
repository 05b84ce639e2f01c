// What the rest of libddp calls to record collectives in the flight recorder
// (include/ddp/flight_recorder.h): ProcessGroup on issue, Work on start and
// completion, DDP to name the bucket a collective carries, and the places
// that find ranks disagreeing.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

namespace ddp::detail::flight {

// Whether collectives are recorded at all (DDP_FLIGHT_RECORDER_SIZE > 0).
bool recording();

// Registers a group whose collectives are recorded under `name` (the same
// on every rank); returns its index, or -1 when recording is off or the
// table is full (then the group is not recorded).
int add_group(const std::string& name, int rank, int size, const std::string& backend);

// The recorder stores a collective's kind and reduce op as codes; the layer
// that records (the collectives') says how they are named, before it
// records: functions that are signal-safe (a dump may run in a handler).
struct CodeNames {
  const char* (*kind)(uint8_t code);
  const char* (*op)(int8_t code);  // code >= 0
};
void name_codes(CodeNames names);

struct Issue {
  int group = -1;
  uint64_t seq = 0;
  uint8_t kind = 0;  // a code named by CodeNames::kind
  int8_t op = -1;    // a code named by CodeNames::op; -1: none
  int8_t dtype = -1; // c10::ScalarType; -1: none
  int64_t count = 0;
  int32_t root = -1;
  int64_t issued_ticks = 0;  // now_ticks() when it was issued
};
// Records a collective as queued (the bucket is the calling thread's
// BucketScope); returns its record id, never 0.
uint64_t issue(const Issue& issue);
// The backend took it up; always before finished() of the same record.
void started(uint64_t record, int64_t ticks);
// It completed, or failed with `error`: the first failure of the process is
// dumped (when a directory is set).
void finished(uint64_t record, const std::exception_ptr& error, int64_t ended_ns);

// While one lives, `record` is the calling thread's pending record: the
// first Work made on this thread meanwhile takes it (Work's constructor
// calls take_pending_record), so that the backend's own Work starts and
// finishes it. ProcessGroup makes one around each backend call; a group
// that does not record makes one of 0, so that the Works of a composition's
// parts take nothing.
//
// Inline, on a thread-local of the initial-exec model: a group that does not
// record pays a few loads and stores per collective.
extern __attribute__((tls_model("initial-exec"))) thread_local uint64_t pending_record;

class PendingRecord {
 public:
  explicit PendingRecord(uint64_t record) : record_(record), previous_(pending_record) {
    pending_record = record;
  }
  // Unsettled (the backend threw), the record is marked failed.
  ~PendingRecord() {
    if (record_ != 0 && !settled_ && pending_record == record_) fail_unclaimed(record_);
    pending_record = previous_;
  }
  PendingRecord(const PendingRecord&) = delete;
  PendingRecord& operator=(const PendingRecord&) = delete;

  // After the backend returned its Work: the record when no Work took it
  // (the group handed back a Work made by one of its parts), which the
  // caller's Work then carries (started now, finished with it); 0 when the
  // backend's Work took it.
  uint64_t settle() {
    settled_ = true;
    if (record_ == 0 || pending_record != record_) return 0;  // taken by the backend's Work
    pending_record = 0;
    return record_;
  }

 private:
  static void fail_unclaimed(uint64_t record);

  const uint64_t record_;
  const uint64_t previous_;
  bool settled_ = false;
};

// The calling thread's pending record, which is then no longer pending; 0
// when there is none.
inline uint64_t take_pending_record() {
  const uint64_t record = pending_record;
  pending_record = 0;
  return record;
}

// Dumps the ring after the first failure of a recorded collective (later
// ones dump nothing), when a directory is set; `what` is the error.
void dump_after_failure(const std::string& what);

// Dumps the ring after an error found outside a collective (ranks that
// disagree, a wait that timed out), when a directory is set. Never throws:
// a dump that fails says so on stderr.
void dump_after_error(const std::string& reason);

// While one lives, collectives issued by this thread carry `bucket`.
class BucketScope {
 public:
  explicit BucketScope(int bucket);
  ~BucketScope();
  BucketScope(const BucketScope&) = delete;
  BucketScope& operator=(const BucketScope&) = delete;

 private:
  int previous_;
};

}  // namespace ddp::detail::flight
