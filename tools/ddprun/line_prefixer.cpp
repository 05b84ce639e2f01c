// Output prefixing: "[rank R] " in front of every line a rank writes.
//
// The supervision loop feeds whatever it read from a rank's stdout or stderr
// pipe; complete lines are prefixed and written out in one write_all() call,
// the incomplete tail is kept until more data or EOF arrives (at EOF it is
// written with a newline added). A line longer than kMaxPending bytes is
// cut into several prefixed lines so memory stays bounded.
#include "line_prefixer.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace ddprun {
namespace {

constexpr std::size_t kMaxPending = 64 * 1024;
constexpr int kOutputStallLimitMs = 30 * 1000;

}  // namespace

bool write_all(int fd, const char* data, std::size_t size) {
  int stalled_ms = 0;
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<std::size_t>(n);
      stalled_ms = 0;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // Someone made our stdout non-blocking: wait for room, but not forever.
      if (stalled_ms >= kOutputStallLimitMs) return false;
      pollfd pfd{fd, POLLOUT, 0};
      poll(&pfd, 1, 100);
      stalled_ms += 100;
      continue;
    }
    return false;
  }
  return true;
}

LinePrefixer::LinePrefixer(std::string prefix, int out_fd)
    : prefix_(std::move(prefix)), out_fd_(out_fd) {}

void LinePrefixer::feed(const char* data, std::size_t size) {
  pending_.append(data, size);
  const std::size_t last_newline = pending_.rfind('\n');
  std::string out;
  std::size_t consumed = 0;
  if (last_newline != std::string::npos) {
    out.reserve(last_newline + 1 + prefix_.size() * 8);
    std::size_t start = 0;
    while (start <= last_newline) {
      const std::size_t end = pending_.find('\n', start);
      out += prefix_;
      out.append(pending_, start, end - start + 1);
      start = end + 1;
    }
    consumed = last_newline + 1;
  }
  // An over-long line without newline: emit what we have as its own line.
  while (pending_.size() - consumed > kMaxPending) {
    out += prefix_;
    out.append(pending_, consumed, kMaxPending);
    out += '\n';
    consumed += kMaxPending;
  }
  pending_.erase(0, consumed);
  if (!out.empty()) write_all(out_fd_, out.data(), out.size());
}

void LinePrefixer::finish() {
  if (pending_.empty()) return;
  std::string out = prefix_ + pending_ + '\n';
  pending_.clear();
  write_all(out_fd_, out.data(), out.size());
}

}  // namespace ddprun
