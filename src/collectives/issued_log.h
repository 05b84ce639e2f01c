// What a ProcessGroup issued, kept behind a pointer of its own
// (ddp/process_group.h): the tally that DDP compares across ranks in the
// status all-reduce it runs each iteration, and the group's recording in the
// flight recorder. The layers above read it here (the Reducer takes the
// tally, new_process_group turns recording on); it is no part of the public
// contract.
#pragma once

#include <ddp/process_group.h>

#include "base/mutex.h"

#include <atomic>
#include <cstdint>
#include <string>

namespace ddp::detail {

class IssuedLog {
 public:
  // One collective as the tally and the flight recorder see it.
  struct Collective {
    OpKind kind;
    int64_t op, dtype, count, root;  // -1 where it does not apply
  };
  // How many collectives, and an order-sensitive hash of each one's kind,
  // reduce op, dtype, element count and root.
  struct Tally {
    uint64_t count = 0;
    uint64_t hash = 0;
  };

  static IssuedLog& of(ProcessGroup& group) { return *group.issued_; }

  // Records `c` in the flight recorder as queued, before the backend sees it;
  // returns its record, 0 when the group does not record.
  uint64_t record(const Collective& c);
  // Counts `c` into the tally, once the group has accepted it.
  void note(const Collective& c);

  // What the group issued since the last take_tally() (or its creation).
  // Every rank must take it at the same point of its program.
  Tally take_tally();

  // Records every collective issued on `group` (this log's) in the flight
  // recorder (ddp/flight_recorder.h) under `name`, which must be the same on
  // every rank. new_process_group does it for the group it returns; the
  // groups inside it (a composition's parts) are not recorded. At most once
  // per group: InvalidArgument the second time.
  void record_flights(const ProcessGroup& group, const std::string& name);

 private:
  std::atomic<int> flight_group_{-1};    // the recorder's index; -1: not recorded
  std::atomic<uint64_t> flight_seq_{0};  // the next recorded collective's number
  Mutex tally_mutex_;
  Tally tally_ DDP_GUARDED_BY(tally_mutex_);
};

inline IssuedLog::Tally take_tally(ProcessGroup& group) {
  return IssuedLog::of(group).take_tally();
}

inline void record_flights(ProcessGroup& group, const std::string& name) {
  IssuedLog::of(group).record_flights(group, name);
}

}  // namespace ddp::detail
