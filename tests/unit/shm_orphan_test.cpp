// A segment whose creator was killed before the last peer mapped it keeps
// its /dev/shm name: the next segment made in this PID namespace removes it
// (src/collectives/shm/segment.h, fresh_segment_name), and leaves the names
// of live creators alone.
#include "collectives/shm/segment.h"

#include <gtest/gtest.h>

#include <string>

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using ddp::detail::shm::create_mapping;
using ddp::detail::shm::fresh_segment_name;

bool exists(const std::string& name) {
  struct stat st {};
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

TEST(ShmOrphans, ADeadCreatorsNameGoesWithTheNextSegment) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // creates a segment, reports its name and dies without removing it
    close(pipe_fds[0]);
    const std::string name = fresh_segment_name();
    create_mapping(name, 4096);
    const ssize_t wrote = write(pipe_fds[1], name.c_str(), name.size());
    _exit(wrote == static_cast<ssize_t>(name.size()) ? 0 : 1);
  }
  close(pipe_fds[1]);
  char buffer[256] = {};
  const ssize_t got = read(pipe_fds[0], buffer, sizeof(buffer) - 1);
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_GT(got, 0);
  const std::string orphan(buffer, static_cast<size_t>(got));
  ASSERT_TRUE(exists(orphan)) << orphan;

  const std::string mine = fresh_segment_name();  // this process's own stays
  munmap(create_mapping(mine, 4096), 4096);
  EXPECT_FALSE(exists(orphan)) << orphan << " outlived its dead creator";
  fresh_segment_name();
  EXPECT_TRUE(exists(mine)) << "a live creator's segment " << mine << " was removed";
  shm_unlink(mine.c_str());
}

}  // namespace
