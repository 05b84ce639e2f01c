// One rank's DDP_TIMELINE file (docs/ddp.md, "Timeline"): a Chrome trace in
// the JSON array format, opened once per (process, rank), events buffered
// and written every second, every 256 KiB, when a DDP module is destroyed,
// and at exit. After each write the file ends in "]", so it is valid JSON
// while training goes on; a write that fails is reported once on stderr and
// ends the timeline, never the training.
#pragma once

#include "base/mutex.h"

#include "timeline/chrome_trace.h"

#include <cstdint>
#include <memory>
#include <string>

namespace ddp::detail {

// The file of `rank` for DDP_TIMELINE=`value`: "{rank}" in it is replaced by
// the rank; else an existing directory gets "timeline.rank<R>.json" inside
// it; else ".rank<R>" goes before a final ".json", or ".rank<R>.json" is
// appended.
std::string timeline_file(const std::string& value, int rank);

class RankTimeline {
 public:
  // This process's timeline of `rank` when DDP_TIMELINE is set (the same
  // object for every caller with that rank), else nullptr. Opens the file at
  // the first call: InvalidArgument naming the variable, the file and the
  // cause when it cannot be written.
  static std::shared_ptr<RankTimeline> open_from_env(int rank);
  // Opens (truncates) `path` now; `variable` names where it came from.
  RankTimeline(int rank, std::string path, const std::string& variable);
  ~RankTimeline();
  RankTimeline(const RankTimeline&) = delete;
  RankTimeline& operator=(const RankTimeline&) = delete;

  // Any thread. `iteration` >= 0 goes into the event's args.
  void add(const TraceSpan& span, int64_t iteration = -1);
  void flush();
  int rank() const { return rank_; }
  const std::string& path() const { return path_; }

  // The timeline of the DDP module that ran last on this thread (for
  // ddp::TimelineSpan); none before, or when its timeline is off.
  static std::shared_ptr<RankTimeline> current();
  static void make_current(const std::shared_ptr<RankTimeline>& timeline);

 private:
  void write_locked() DDP_REQUIRES(mutex_);

  const int rank_;
  const std::string path_;
  Mutex mutex_;
  int fd_ DDP_GUARDED_BY(mutex_) = -1;           // -1 once a write failed
  int64_t body_end_ DDP_GUARDED_BY(mutex_) = 0;  // where the closing "]" goes
  TraceText pending_ DDP_GUARDED_BY(mutex_);     // not yet written
  ChromeTraceEncoder encoder_ DDP_GUARDED_BY(mutex_);
  TraceClock::time_point last_write_ DDP_GUARDED_BY(mutex_);
};

}  // namespace ddp::detail
