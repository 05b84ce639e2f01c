#include "timeline/rank_timeline.h"

#include <ddp/errors.h>
#include <ddp/timeline.h>

#include "base/mutex.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ddp::detail {
namespace {

constexpr const char* kVariable = "DDP_TIMELINE";
constexpr const char* kTail = "\n]\n";
constexpr size_t kWriteBytes = 256 << 10;
constexpr auto kWriteInterval = std::chrono::seconds(1);

thread_local std::weak_ptr<RankTimeline> current_timeline;

// Every rank's timeline of this process, written out at exit (when the
// program never destroyed its modules, or holds them in globals).
struct Registry {
  Mutex mutex;
  std::map<std::string, std::shared_ptr<RankTimeline>> by_path DDP_GUARDED_BY(mutex);
  ~Registry() {
    for (auto& entry : by_path) entry.second->flush();
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

bool write_all(int fd, const char* data, size_t size, int64_t offset) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, data, size, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
  return true;
}

}  // namespace

std::string timeline_file(const std::string& value, int rank) {
  const std::string r = std::to_string(rank);
  const auto brace = value.find("{rank}");
  if (brace != std::string::npos) return std::string(value).replace(brace, 6, r);
  struct stat st {};
  if (::stat(value.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return value + (value.back() == '/' ? "" : "/") + "timeline.rank" + r + ".json";
  }
  const std::string ext = ".json";
  if (value.size() > ext.size() && value.compare(value.size() - ext.size(), ext.size(), ext) == 0) {
    return value.substr(0, value.size() - ext.size()) + ".rank" + r + ext;
  }
  return value + ".rank" + r + ext;
}

std::shared_ptr<RankTimeline> RankTimeline::open_from_env(int rank) {
  const char* value = std::getenv(kVariable);
  if (!value || !*value) return nullptr;
  const std::string path = timeline_file(value, rank);
  Registry& reg = registry();
  MutexLock lock(reg.mutex);
  auto& slot = reg.by_path[path];
  if (!slot) {
    try {
      slot = std::make_shared<RankTimeline>(rank, path, std::string(kVariable) + "=" + value);
    } catch (...) {
      reg.by_path.erase(path);
      throw;
    }
  }
  return slot;
}

RankTimeline::RankTimeline(int rank, std::string path, const std::string& variable)
    : rank_(rank), path_(std::move(path)), encoder_(rank, "rank " + std::to_string(rank)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw InvalidArgument(ErrorContext{rank_, 0, "", variable, {}},
                          "cannot write the timeline file '" + path_ +
                              "': " + std::strerror(errno) +
                              ". Set DDP_TIMELINE to a file or directory this process can write "
                              "(see docs/ddp.md, Timeline), or unset it.");
  }
  MutexLock lock(mutex_);
  const std::string head = "[\n";
  write_all(fd_, head.data(), head.size(), 0);
  body_end_ = static_cast<int64_t>(head.size());
  encoder_.metadata(pending_);
  write_locked();
}

RankTimeline::~RankTimeline() {
  flush();
  MutexLock lock(mutex_);
  if (fd_ >= 0) ::close(fd_);
}

void RankTimeline::add(const TraceSpan& span, int64_t iteration) {
  MutexLock lock(mutex_);
  if (fd_ < 0) return;
  encoder_.span(pending_, span.lane, span.name, trace_micros(span.start), trace_micros(span.end),
                span.blocking, iteration >= 0 ? "\"iteration\":" + std::to_string(iteration) : "");
  if (pending_.text.size() >= kWriteBytes || TraceClock::now() - last_write_ >= kWriteInterval) {
    write_locked();
  }
}

void RankTimeline::flush() {
  MutexLock lock(mutex_);
  write_locked();
}

// The new events over the previous closing "]", then a new one: the file is
// whole JSON again after every write.
void RankTimeline::write_locked() {
  last_write_ = TraceClock::now();
  if (fd_ < 0 || pending_.text.empty()) return;
  const std::string& body = pending_.text;
  const bool ok =
      write_all(fd_, body.data(), body.size(), body_end_) &&
      write_all(fd_, kTail, std::strlen(kTail), body_end_ + static_cast<int64_t>(body.size()));
  if (!ok) {
    std::cerr << "ddp[rank " << rank_ << "]: DDP_TIMELINE: writing '" << path_
              << "' failed: " << std::strerror(errno)
              << "; the timeline ends here, training goes on" << std::endl;
    ::close(fd_);
    fd_ = -1;
  }
  body_end_ += static_cast<int64_t>(body.size());
  pending_.text.clear();
}

std::shared_ptr<RankTimeline> RankTimeline::current() { return current_timeline.lock(); }

void RankTimeline::make_current(const std::shared_ptr<RankTimeline>& timeline) {
  current_timeline = timeline;
}

}  // namespace ddp::detail

namespace ddp {

TimelineSpan::TimelineSpan(std::string name)
    : timeline_(detail::RankTimeline::current()), start_(std::chrono::steady_clock::now()) {
  if (timeline_) name_ = std::move(name);
}

TimelineSpan::~TimelineSpan() { end(); }

void TimelineSpan::end() {
  if (!timeline_) return;
  timeline_->add({"compute", name_, start_, std::chrono::steady_clock::now()});
  timeline_.reset();
}

bool timeline_active() { return detail::RankTimeline::current() != nullptr; }

}  // namespace ddp
