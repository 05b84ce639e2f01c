// Writing a dump (format.h). It may run in a signal handler, so it is made of
// async-signal-safe calls only: open, write, rename, close and the clock; no
// allocation, no locks, no stdio; numbers are formatted by hand.
#include "flight/format.h"
#include "flight/ring.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace ddp::detail::flight {
namespace {

// The writing buffer (on the stack: no allocation); it is written out once
// it holds kFlushAt bytes, so a line may take up to the difference.
constexpr size_t kBufferSize = 16384;
constexpr size_t kFlushAt = kBufferSize - 2048;
constexpr size_t kReasonLimit = 1024;  // longer reasons end with "..."

// Makes the temporary names of dumps written at once (a failure's and the
// launcher's SIGTERM) differ. Lock-free: safe in a handler.
std::atomic<uint32_t> dumps_begun{0};

// Appends to a fixed buffer; `overflow` once something did not fit.
class Text {
 public:
  Text(char* buffer, size_t size) : buffer_(buffer), size_(size) { buffer_[0] = '\0'; }
  Text& str(const char* s) {
    while (*s) put(*s++);
    return *this;
  }
  // Like str, with line breaks made spaces (a reason is one line), and at
  // most `limit` characters, then "...".
  Text& line_text(const char* s, size_t limit) {
    for (size_t n = 0; *s; ++s, ++n) {
      if (n == limit) return str("...");
      put(*s == '\n' || *s == '\r' ? ' ' : *s);
    }
    return *this;
  }
  Text& num(int64_t v) {
    if (v >= 0) return unum(static_cast<uint64_t>(v));
    put('-');
    return unum(0 - static_cast<uint64_t>(v));
  }
  Text& unum(uint64_t v) {
    char digits[24];
    int n = 0;
    do {
      digits[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (n > 0) put(digits[--n]);
    return *this;
  }
  size_t size() const { return used_; }
  const char* data() const { return buffer_; }
  void clear() {
    used_ = 0;
    buffer_[0] = '\0';
  }
  bool overflow() const { return overflow_; }

 private:
  void put(char c) {
    if (used_ + 1 >= size_) {
      overflow_ = true;
      return;
    }
    buffer_[used_++] = c;
    buffer_[used_] = '\0';
  }
  char* buffer_;
  size_t size_;
  size_t used_ = 0;
  bool overflow_ = false;
};

// Writes all of `text` to `fd`; 0 or an errno.
int write_all(int fd, const Text& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return 0;
}

void process_name(const Recorder& r, Text& t) {
  const int rank = r.rank.load();
  if (rank >= 0) {
    t.str("rank").num(rank);
  } else {
    t.str("pid").num(getpid());
  }
}

// Writes `t` out and empties it when it is nearly full (`force`: always);
// 0 or an errno.
int flush(int fd, Text& t, bool force = false) {
  if (t.overflow()) return ENOBUFS;  // a line longer than the buffer: never
  if (!force && t.size() < kFlushAt) return 0;
  int err = write_all(fd, t);
  t.clear();
  return err;
}

// The header and the group table; returns 0 or an errno, and in `groups`
// how many groups it names (records of later ones are left out).
int header(const Recorder& r, int fd, const char* reason, int64_t now_ns, Text& t, int& groups) {
  t.str(flight_format::kMagic).str("\nprocess ");
  process_name(r, t);
  t.str("\nrank ").num(r.rank.load()).str("\npid ").num(getpid());
  t.str("\nhost ").str(r.host).str("\nreason ").line_text(reason, kReasonLimit);
  t.str("\ndumped_ns ").num(now_ns).str("\ncapacity ").unum(r.capacity).str("\n");
  groups = r.group_count.load() < kMaxGroups ? r.group_count.load() : kMaxGroups;
  for (int i = 0; i < groups; ++i) {
    const GroupEntry& g = r.groups[i];
    if (!g.ready.load(std::memory_order_acquire)) continue;
    t.str("group ").num(i).str(" ").num(g.rank).str(" ").num(g.size).str(" ");
    t.str(g.backend).str(" ").str(g.name).str("\n");
    if (int err = flush(fd, t)) return err;
  }
  return 0;
}

void record_line(const Recorder& r, const RecordCopy& c, int64_t ticks_now, int64_t ns_now,
                 Text& t) {
  t.str("record ").unum(c.seq).str(" ").num(c.group).str(" ");
  t.str(kind_name(c.kind)).str(" ").str(op_name(c.op)).str(" ").str(dtype_name(c.dtype)).str(" ");
  t.num(c.count).str(" ").num(c.root).str(" ").num(c.bucket).str(" ");
  t.str(to_string(static_cast<FlightState>(c.state))).str(" ");
  t.num(ticks_to_ns(r, c.issued_ticks, ticks_now, ns_now)).str(" ");
  t.num(ticks_to_ns(r, c.started_ticks, ticks_now, ns_now)).str(" ");
  t.num(c.ended_ns).str("\n");
}

int write_records(const Recorder& r, int fd, const char* reason) {
  const int64_t ticks_now = now_ticks(), ns_now = steady_ns();
  char buffer[kBufferSize];
  Text t(buffer, sizeof(buffer));
  int groups = 0;
  if (int err = header(r, fd, reason, ns_now, t, groups)) return err;
  if (int err = for_each_record(r, groups, [&](const RecordCopy& c) {
        record_line(r, c, ticks_now, ns_now, t);
        return flush(fd, t);
      })) {
    return err;
  }
  return flush(fd, t, /*force=*/true);
}

}  // namespace

int write_dump(const Recorder& r, const char* dir, const char* reason, char* path,
               size_t path_size) {
  Text p(path, path_size);
  p.str(dir).str("/");
  process_name(r, p);
  p.str(flight_format::kSuffix);
  char temporary_path[kPathSize + 48];
  Text tmp(temporary_path, sizeof(temporary_path));
  tmp.str(path).str(".tmp").num(getpid()).str(".").unum(dumps_begun.fetch_add(1));
  if (p.overflow() || tmp.overflow()) return ENAMETOOLONG;
  const int fd = open(temporary_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int err = write_records(r, fd, reason);
  if (close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && rename(temporary_path, path) != 0) err = errno;
  if (err != 0) unlink(temporary_path);
  return err;
}

}  // namespace ddp::detail::flight
