#include "flight_verdict.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

namespace ddp::flight {
namespace {

// What must match across ranks for one collective.
std::string signature(const FlightRecord& r) {
  std::string s = r.kind + " (";
  if (r.op != "-") s += r.op + ", ";
  if (r.kind == "broadcast") s += "root " + std::to_string(r.root) + ", ";
  if (r.dtype != "-") s += r.dtype + ", ";
  return s + std::to_string(r.count) + " elements)";
}

// "allreduce #12 (SUM, Float, 4096 elements)", with its bucket when known.
std::string named(const FlightRecord& r) {
  std::string s = r.kind + " #" + std::to_string(r.seq) + signature(r).substr(r.kind.size());
  if (r.bucket >= 0) s += " of DDP bucket " + std::to_string(r.bucket);
  return s;
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string seconds(int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", static_cast<double>(ns) / 1e9);
  return text;
}

// One group as the ranks that dumped see it.
struct GroupView {
  std::string name;
  int size = 0;
  std::map<int, const FlightDump*> dumps;                     // by group rank
  std::map<int, std::map<uint64_t, const FlightRecord*>> by_seq;  // rank -> seq -> record
};

// How long `r` had run when its rank dumped, or until it failed.
std::string how_long(const FlightRecord& r, const FlightDump& d) {
  const int64_t since = r.started_ns ? r.started_ns : r.issued_ns;
  if (since == 0) return "";
  if (r.state == FlightState::FAILED && r.ended_ns) {
    return ", failed after " + seconds(r.ended_ns - since);
  }
  return ", " + std::string(to_string(r.state)) + " " + seconds(d.dumped_ns - since) +
         " before the dump";
}

struct Finding {
  int severity = 0;  // 0: nothing wrong
  std::string text;
};

// The first not-completed collective of `rank`, or null.
const FlightRecord* in_flight(const GroupView& g, int rank) {
  for (const auto& [seq, r] : g.by_seq.at(rank)) {
    if (r->state != FlightState::COMPLETED) return r;
  }
  return nullptr;
}

Finding disagreement(const GroupView& g) {
  std::set<uint64_t> seqs;
  for (const auto& [rank, records] : g.by_seq) {
    for (const auto& [seq, r] : records) seqs.insert(seq);
  }
  for (uint64_t seq : seqs) {
    std::map<std::string, std::vector<int>> ranks_by_signature;
    for (const auto& [rank, records] : g.by_seq) {
      auto it = records.find(seq);
      if (it != records.end()) ranks_by_signature[signature(*it->second)].push_back(rank);
    }
    if (ranks_by_signature.size() < 2) continue;
    std::vector<std::pair<std::string, std::vector<int>>> sides(ranks_by_signature.begin(),
                                                                ranks_by_signature.end());
    // The largest side first; among equals, the one with the lowest rank.
    std::sort(sides.begin(), sides.end(), [](const auto& a, const auto& b) {
      if (a.second.size() != b.second.size()) return a.second.size() > b.second.size();
      return a.second[0] < b.second[0];
    });
    const std::string at = " #" + std::to_string(seq) + " of group " + g.name;
    if (sides[0].second.size() > sides[1].second.size()) {
      std::string text;
      for (size_t i = 1; i < sides.size(); ++i) {
        text += (i > 1 ? "; " : "") + ranks_text(sides[i].second) + " issued " + sides[i].first;
      }
      return {5, text + " as collective" + at + " where " + ranks_text(sides[0].second) +
                     " issued " + sides[0].first};
    }
    std::string text = "the ranks disagree on collective" + at + ":";
    for (size_t i = 0; i < sides.size(); ++i) {
      text += (i ? ";" : "") + std::string(" ") + ranks_text(sides[i].second) + " issued " +
              sides[i].first;
    }
    return {5, text};
  }
  return {};
}

// Where the ranks in `ranks` were: the earliest collective one of them had
// not completed.
std::string where_they_were(const GroupView& g, const std::vector<int>& ranks) {
  const FlightRecord* earliest = nullptr;
  int at = -1;
  for (int rank : ranks) {
    const FlightRecord* r = in_flight(g, rank);
    if (r && (!earliest || r->seq < earliest->seq)) {
      earliest = r;
      at = rank;
    }
  }
  if (!earliest) return "had completed every collective they issued";
  return "were in " + named(*earliest) + " of group " + g.name +
         how_long(*earliest, *g.dumps.at(at));
}

Finding missing(const GroupView& g) {
  std::vector<int> absent, present;
  for (int rank = 0; rank < g.size; ++rank) {
    (g.dumps.count(rank) ? present : absent).push_back(rank);
  }
  if (absent.empty()) return {};
  return {4, ranks_text(absent) + " left no dump (killed or stopped, which leave none, or ended "
                                  "before the others failed) while " +
                 ranks_text(present) + " " + where_they_were(g, present)};
}

Finding behind(const GroupView& g) {
  std::map<int64_t, std::vector<int>> ranks_by_last;  // -1: none issued
  for (const auto& [rank, records] : g.by_seq) {
    ranks_by_last[records.empty() ? -1 : static_cast<int64_t>(records.rbegin()->first)]
        .push_back(rank);
  }
  if (ranks_by_last.size() < 2) return {};
  const auto& [last, laggards] = *ranks_by_last.begin();
  std::vector<int> ahead;
  for (auto it = std::next(ranks_by_last.begin()); it != ranks_by_last.end(); ++it) {
    ahead.insert(ahead.end(), it->second.begin(), it->second.end());
  }
  std::sort(ahead.begin(), ahead.end());
  // The collective the laggards did not issue, as the first rank ahead has it
  // (a ring that wrapped may have lost it: then only its number is known).
  const auto& ahead_records = g.by_seq.at(ahead[0]);
  auto next = ahead_records.find(static_cast<uint64_t>(last + 1));
  const bool known = next != ahead_records.end();
  std::string text = ranks_text(laggards) + " never issued " +
                     (known ? named(*next->second) : "collective #" + std::to_string(last + 1)) +
                     " of group " + g.name + " (";
  const FlightDump& laggard = *g.dumps.at(laggards[0]);
  if (last < 0 && laggard.capacity > 0 && laggard.records.size() >= laggard.capacity) {
    text += "its ring no longer holds any of the group's collectives: newer ones of other "
            "groups filled it";
  } else if (last < 0) {
    text += "no collective of the group at all";
  } else {
    const FlightRecord& mine = *g.by_seq.at(laggards[0]).at(static_cast<uint64_t>(last));
    text += "last: #" + std::to_string(last) + ", " + to_string(mine.state);
  }
  return {3, text + "), which " + ranks_text(ahead) + " issued" +
                 (known ? how_long(*next->second, *g.dumps.at(ahead[0])) : "")};
}

Finding stuck(const GroupView& g) {
  std::vector<int> ranks;
  for (const auto& [rank, records] : g.by_seq) ranks.push_back(rank);
  std::vector<int> waiting;
  for (int rank : ranks) {
    if (in_flight(g, rank)) waiting.push_back(rank);
  }
  if (waiting.empty()) return {};
  return {2, "every rank of group " + g.name + " issued the same collectives; " +
                 ranks_text(waiting) + " " + where_they_were(g, waiting)};
}

std::vector<GroupView> group_views(const std::vector<FlightDump>& dumps) {
  std::map<std::string, GroupView> views;
  for (const FlightDump& d : dumps) {
    for (const auto& group : d.groups) {
      GroupView& v = views[group.name];
      v.name = group.name;
      v.size = std::max(v.size, group.size);
      v.dumps[group.rank] = &d;
      v.by_seq[group.rank];
    }
    for (const FlightRecord& r : d.records) views[r.group].by_seq[r.group_rank][r.seq] = &r;
  }
  std::vector<GroupView> out;
  for (auto& [name, v] : views) out.push_back(std::move(v));
  return out;
}

}  // namespace

std::string flight_verdict(const std::vector<FlightDump>& dumps) {
  if (dumps.empty()) return "no dumps to read";
  Finding worst;
  size_t collectives = 0;
  for (const GroupView& g : group_views(dumps)) {
    for (const auto& [rank, records] : g.by_seq) collectives = std::max(collectives, records.size());
    for (auto judge : {disagreement, missing, behind, stuck}) {
      Finding f = judge(g);
      if (f.severity > worst.severity) worst = f;
      if (f.severity > 0) break;
    }
  }
  if (worst.severity > 0) return worst.text;
  return "no rank stopped and none disagreed: every rank completed the " +
         std::to_string(collectives) + " collectives its dump holds";
}

std::vector<std::string> flight_summary(const std::vector<FlightDump>& dumps) {
  std::vector<std::string> lines;
  for (const FlightDump& d : dumps) {
    std::string line = d.process + " (pid " + std::to_string(d.pid) + " on " + d.host + "): ";
    std::map<std::string, const FlightRecord*> last;
    for (const FlightRecord& r : d.records) last[r.group] = &r;
    for (const auto& [group, r] : last) {
      line += "last in " + group + ": " + named(*r) + " " + to_string(r->state) + "; ";
    }
    lines.push_back(line + "dumped on: " + d.reason);
  }
  return lines;
}

}  // namespace ddp::flight
