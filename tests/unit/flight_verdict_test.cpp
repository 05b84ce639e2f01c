// ddp-flight's verdict (tools/flight/flight_verdict.h) on dumps made up in
// the test: each finding, the rank it names, and the order in which the
// findings win.
#include "flight_verdict.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ddp::flight {
namespace {

// A dump of group "g" (3 ranks) holding `count` completed allreduces of
// 1024 floats, the last of them in `last_state`.
FlightDump dump(int rank, uint64_t count, FlightState last_state = FlightState::COMPLETED) {
  FlightDump d;
  d.process = "rank" + std::to_string(rank);
  d.rank = rank;
  d.dumped_ns = 10'000'000'000;
  d.groups.push_back({"g", "shm", rank, 3});
  for (uint64_t seq = 1; seq <= count; ++seq) {
    FlightRecord r;
    r.seq = seq;
    r.group = "g";
    r.group_rank = rank;
    r.group_size = 3;
    r.kind = "allreduce";
    r.op = "SUM";
    r.dtype = "Float";
    r.count = 1024;
    r.state = seq == count ? last_state : FlightState::COMPLETED;
    r.issued_ns = r.started_ns = 1'000'000'000 * static_cast<int64_t>(seq);
    d.records.push_back(r);
  }
  return d;
}

TEST(flight_verdict, AllCompletedIsSaid) {
  EXPECT_EQ(flight_verdict({dump(0, 4), dump(1, 4), dump(2, 4)}),
            "no rank stopped and none disagreed: every rank completed the 4 collectives its "
            "dump holds");
}

TEST(flight_verdict, AMissingDumpNamesTheRankAndWhereTheOthersWaited) {
  EXPECT_EQ(flight_verdict({dump(0, 5, FlightState::STARTED), dump(2, 5, FlightState::STARTED)}),
            "rank 1 left no dump (killed or stopped, which leave none, or ended before the "
            "others failed) while ranks 0, 2 were in allreduce #5 (SUM, Float, 1024 elements) of group g, started "
            "5.0 s before the dump");
}

TEST(flight_verdict, ARankBehindIsNamedWithTheCollectiveItNeverIssued) {
  auto ahead = dump(0, 6, FlightState::FAILED);
  ahead.records.back().ended_ns = ahead.records.back().started_ns + 5'000'000'000;
  ahead.records.back().bucket = 2;
  EXPECT_EQ(flight_verdict({ahead, dump(1, 5), dump(2, 6, FlightState::FAILED)}),
            "rank 1 never issued allreduce #6 (SUM, Float, 1024 elements) of DDP bucket 2 of "
            "group g (last: #5, completed), which ranks 0, 2 issued, failed after 5.0 s");
}

TEST(flight_verdict, TheMinorityOfADisagreementIsNamed) {
  auto odd = dump(1, 5, FlightState::FAILED);
  odd.records[2].kind = "broadcast";
  odd.records[2].op = "-";
  odd.records[2].root = 0;
  EXPECT_EQ(flight_verdict({dump(0, 5, FlightState::FAILED), odd, dump(2, 5)}),
            "rank 1 issued broadcast (root 0, Float, 1024 elements) as collective #3 of group g "
            "where ranks 0, 2 issued allreduce (SUM, Float, 1024 elements)");
}

TEST(flight_verdict, TwoRanksThatDisagreeAreBothNamed) {
  auto a = dump(0, 2), b = dump(1, 2);
  a.groups[0].size = b.groups[0].size = 2;
  b.records[1].count = 1025;
  EXPECT_EQ(flight_verdict({a, b}),
            "the ranks disagree on collective #2 of group g: rank 0 issued allreduce (SUM, "
            "Float, 1024 elements); rank 1 issued allreduce (SUM, Float, 1025 elements)");
}

TEST(flight_verdict, ADisagreementOutweighsAMissingRank) {
  auto odd = dump(1, 3);
  odd.records[0].dtype = "Double";
  // Rank 2 left no dump, but ranks 0 and 1 issued different collectives.
  EXPECT_EQ(flight_verdict({dump(0, 3), odd}),
            "the ranks disagree on collective #1 of group g: rank 0 issued allreduce (SUM, "
            "Float, 1024 elements); rank 1 issued allreduce (SUM, Double, 1024 elements)");
}

TEST(flight_verdict, ACollectiveEveryRankIsInIsSaid) {
  EXPECT_EQ(flight_verdict({dump(0, 3, FlightState::STARTED), dump(1, 3, FlightState::STARTED),
                            dump(2, 3)}),
            "every rank of group g issued the same collectives; ranks 0, 1 were in allreduce #3 "
            "(SUM, Float, 1024 elements) of group g, started 7.0 s before the dump");
}

}  // namespace
}  // namespace ddp::flight
