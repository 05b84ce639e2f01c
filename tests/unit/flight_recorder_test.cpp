// The flight recorder (include/ddp/flight_recorder.h) in one process: what a
// recorded group's collectives leave in the ring, through each state; the
// ring's bound; the automatic dump on a failure; a dump read back by
// ddp-flight's reader; a directory that cannot be written.
//
// Each test runs in its own process (gtest_discover_tests), with a ring of 8
// and a dump directory of its own, set before the recorder is made.
#include <ddp/errors.h>
#include <ddp/flight_recorder.h>
#include <ddp/process_group.h>

#include "collectives/issued_log.h"
#include "flight_dump.h"
#include "support/raised.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddp {
namespace {

std::string dump_dir() { return "/tmp/ddp-flight-unit-" + std::to_string(getpid()); }

class RecorderEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    std::system(("mkdir -p " + dump_dir()).c_str());
    setenv("DDP_FLIGHT_RECORDER_DIR", dump_dir().c_str(), 1);
    setenv("DDP_FLIGHT_RECORDER_SIZE", "8", 1);
    unsetenv("RANK");
  }
  void TearDown() override { std::system(("rm -rf " + dump_dir()).c_str()); }
};
const auto* const environment = ::testing::AddGlobalTestEnvironment(new RecorderEnvironment);

// A group whose collectives complete when the test says: each returns a
// Work the test starts and finishes by hand.
class HeldGroup : public ProcessGroup {
 public:
  HeldGroup() : ProcessGroup(/*rank=*/1, /*size=*/2, std::chrono::seconds(5)) {}
  std::string backend_name() const override { return "held"; }
  std::vector<WorkPtr> works;

 protected:
  WorkPtr held() {
    works.push_back(std::make_shared<Work>("held #" + std::to_string(works.size()), timeout()));
    return works.back();
  }
  WorkPtr do_allreduce(at::Tensor, ReduceOp) override { return held(); }
  WorkPtr do_allreduce_coalesced(std::vector<at::Tensor>, ReduceOp) override { return held(); }
  WorkPtr do_broadcast(at::Tensor, int) override { return held(); }
  WorkPtr do_allgather(std::vector<at::Tensor>, at::Tensor) override { return held(); }
  WorkPtr do_reduce_scatter(at::Tensor, std::vector<at::Tensor>, ReduceOp) override {
    return held();
  }
  WorkPtr do_barrier() override { return Work::completed("barrier"); }
};

TEST(flight_recorder, RecordsEachCollectiveThroughItsStates) {
  HeldGroup group;
  ddp::detail::record_flights(group, "test-group");
  auto a = group.allreduce(at::ones({4}), ReduceOp::AVG);
  auto b = group.broadcast(at::ones({3}, at::kDouble), /*root=*/1);
  auto c = group.barrier();  // completed before the group returns it
  auto records = flight_records();
  ASSERT_EQ(records.size(), 3u);
  const FlightRecord& r = records[0];
  EXPECT_EQ(r.seq, 0u);
  EXPECT_EQ(r.group, "test-group");
  EXPECT_EQ(r.group_rank, 1);
  EXPECT_EQ(r.group_size, 2);
  EXPECT_EQ(r.backend, "held");
  EXPECT_EQ(r.kind, "allreduce");
  EXPECT_EQ(r.op, "AVG");
  EXPECT_EQ(r.dtype, "Float");
  EXPECT_EQ(r.count, 4);
  EXPECT_EQ(r.root, -1);
  EXPECT_EQ(r.bucket, -1);
  EXPECT_EQ(r.state, FlightState::QUEUED);
  EXPECT_GT(r.issued_ns, 0);
  EXPECT_EQ(r.started_ns, 0);
  EXPECT_EQ(records[1].kind, "broadcast");
  EXPECT_EQ(records[1].op, "-");
  EXPECT_EQ(records[1].dtype, "Double");
  EXPECT_EQ(records[1].root, 1);
  EXPECT_EQ(records[2].seq, 2u);
  EXPECT_EQ(records[2].kind, "barrier");
  EXPECT_EQ(records[2].dtype, "-");
  EXPECT_EQ(records[2].state, FlightState::COMPLETED);

  group.works[0]->mark_started();
  EXPECT_EQ(flight_records()[0].state, FlightState::STARTED);
  group.works[0]->finish();
  group.works[1]->finish(std::make_exception_ptr(CommunicationError("peer rank 0 is gone")));
  records = flight_records();
  EXPECT_EQ(records[0].state, FlightState::COMPLETED);
  EXPECT_LE(records[0].issued_ns, records[0].started_ns);
  EXPECT_LE(records[0].started_ns, records[0].ended_ns);
  EXPECT_EQ(records[1].state, FlightState::FAILED);
  EXPECT_GT(records[1].ended_ns, 0);
}

TEST(flight_recorder, TheRingKeepsTheLastCollectives) {
  HeldGroup group;
  ddp::detail::record_flights(group, "ring");
  for (int i = 0; i < 20; ++i) group.allreduce(at::ones({i + 1}));
  auto records = flight_records();
  ASSERT_EQ(records.size(), 8u);  // DDP_FLIGHT_RECORDER_SIZE
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i].seq, 12 + i);
    EXPECT_EQ(records[i].count, static_cast<int64_t>(13 + i));
  }
}

TEST(flight_recorder, GroupsNumberTheirCollectivesApart) {
  HeldGroup first, second, unrecorded;
  ddp::detail::record_flights(first, "first");
  ddp::detail::record_flights(second, "second");
  first.allreduce(at::ones({1}));
  second.allreduce(at::ones({1}));
  unrecorded.allreduce(at::ones({1}));
  first.allreduce(at::ones({1}));
  auto records = flight_records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].group + "#" + std::to_string(records[0].seq), "first#0");
  EXPECT_EQ(records[1].group + "#" + std::to_string(records[1].seq), "second#0");
  EXPECT_EQ(records[2].group + "#" + std::to_string(records[2].seq), "first#1");
  EXPECT_THROW(ddp::detail::record_flights(first, "again"), InvalidArgument);
}

TEST(flight_recorder, TheFirstFailureIsDumpedAndReadsBack) {
  HeldGroup group;
  ddp::detail::record_flights(group, "dumped");
  group.allreduce(at::ones({16}));
  group.allreduce(at::ones({16}));
  group.works[0]->finish();
  group.works[1]->mark_started();
  const CommunicationError failure("peer rank 0 is gone");
  group.works[1]->finish(std::make_exception_ptr(failure));
  // The group's rank names the file ($RANK is unset).
  const std::string path = dump_dir() + "/rank1.flight";
  auto dump = flight::read_flight_dump(path);
  EXPECT_EQ(dump.process, "rank1");
  EXPECT_EQ(dump.rank, 1);
  EXPECT_EQ(dump.pid, getpid());
  EXPECT_EQ(dump.reason, std::string("collective failed: ") + failure.what());
  ASSERT_EQ(dump.groups.size(), 1u);
  EXPECT_EQ(dump.groups[0].name, "dumped");
  EXPECT_EQ(dump.groups[0].backend, "held");
  ASSERT_EQ(dump.records.size(), 2u);
  EXPECT_EQ(dump.records[0].state, FlightState::COMPLETED);
  EXPECT_EQ(dump.records[1].state, FlightState::FAILED);
  EXPECT_EQ(dump.records[1].seq, 1u);
  EXPECT_EQ(dump.records[1].count, 16);
  EXPECT_GT(dump.records[1].started_ns, 0);
  // Only the first failure dumps by itself; on demand, any time.
  ::unlink(path.c_str());
  group.allreduce(at::ones({1}));
  group.works[2]->finish(std::make_exception_ptr(CommunicationError("again")));
  EXPECT_FALSE(std::ifstream(path).good());
  EXPECT_EQ(dump_flight_recorder("asked"), path);
  EXPECT_EQ(flight::read_flight_dump(path).reason, "asked");
  EXPECT_EQ(flight::read_flight_dump(path).records.size(), 3u);
}

TEST(flight_recorder, ADirectoryThatCannotBeWrittenIsAClearError) {
  HeldGroup group;
  ddp::detail::record_flights(group, "unwritable");
  const std::string file = dump_dir() + "/a-file";
  std::ofstream(file) << "not a directory";
  ddp::testing::Raised r =
      ddp::testing::raised<Error>([&] { dump_flight_recorder("asked", file + "/dumps"); });
  ASSERT_TRUE(r) << r;
  EXPECT_EQ(r.context.operation, "dump_flight_recorder") << r;
  // The file it could not write, and the OS's error for it.
  EXPECT_TRUE(r.mentions(file + "/dumps/rank1.flight")) << r;
  EXPECT_TRUE(r.mentions(std::strerror(ENOTDIR))) << r;
}

TEST(flight_recorder, ABrokenDumpIsNamedWithItsLine) {
  const std::string path = dump_dir() + "/broken.flight";
  std::ofstream(path) << "ddp-flight-recorder 1\nrank 0\nrecord 1 0 allreduce\n";
  // The reader (tools/flight) throws std::runtime_error, which carries no
  // ErrorContext: its facts are the file, the line and the field count.
  std::string what = "no error";
  try {
    flight::read_flight_dump(path);
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  ASSERT_NE(what, "no error");
  EXPECT_NE(what.find(path + ":3:"), std::string::npos) << what;
  EXPECT_NE(what.find(" 12 "), std::string::npos) << what;
}

}  // namespace
}  // namespace ddp
