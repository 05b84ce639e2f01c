#include "reducer/iteration_agreement.h"

#include <ddp/errors.h>

#include "flight/recorder.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace ddp::detail {
namespace {

// Per rank: marker, missing, forwards, stray_after, collective count, hash (2 halves), joined,
// hints broken.
constexpr int64_t kSlots = 9;
constexpr int32_t kMarker = 0x44445053;  // "DDPS"

std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// "rank 1: 6; ranks 0, 2: 5" — ranks grouped by value, in rank order of first appearance.
template <typename Value, typename Show>
std::string grouped(const std::vector<RankReport>& reports, Value value, Show show) {
  std::vector<std::pair<decltype(value(reports[0])), std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(reports.size()); ++r) {
    auto v = value(reports[r]);
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == v; });
    if (it == groups.end()) {
      groups.push_back({v, {r}});
    } else {
      it->second.push_back(r);
    }
  }
  std::string out;
  for (const auto& g : groups) out += "\n  " + rank_list(g.second) + ": " + show(g.first);
  return out;
}

// "1 (2), 3 (1). On this rank:\n  #4 'fc.weight'...": the ranks whose
// `count` is not zero, with it, then this rank's parameters `here` (or that
// each such rank names its own); empty when every count is zero.
std::string ranks_and_parameters(const std::vector<RankReport>& reports, int32_t RankReport::*count,
                                 const std::vector<size_t>& here,
                                 const std::vector<std::string>& names) {
  std::string ranks;
  for (size_t r = 0; r < reports.size(); ++r) {
    const int32_t n = reports[r].*count;
    if (n == 0) continue;
    ranks += (ranks.empty() ? "" : ", ") + std::to_string(r) + " (" + std::to_string(n) + ")";
  }
  if (ranks.empty() || here.empty()) {
    return ranks.empty() ? ranks : ranks + " (each such rank names them)";
  }
  std::string params;
  for (size_t i : here) params += "\n  #" + std::to_string(i) + " '" + names[i] + "'";
  return ranks + ". On this rank:" + params;
}

// The ranks whose `count` is not zero, in rank order.
std::vector<int> ranks_with(const std::vector<RankReport>& reports, int32_t RankReport::*count) {
  std::vector<int> out;
  for (size_t r = 0; r < reports.size(); ++r) {
    if (reports[r].*count != 0) out.push_back(static_cast<int>(r));
  }
  return out;
}

// The ranks outside the largest group of equal tallies (on a tie, the group
// of the lowest rank): the ranks whose collectives differ from the most.
std::vector<int> tally_outliers(const std::vector<RankReport>& reports) {
  auto same = [&](size_t a, size_t b) {
    return reports[a].tally.count == reports[b].tally.count &&
           reports[a].tally.hash == reports[b].tally.hash;
  };
  size_t best = 0, best_size = 0;
  for (size_t r = 0; r < reports.size(); ++r) {
    size_t n = 0;
    for (size_t s = 0; s < reports.size(); ++s) n += same(r, s) ? 1 : 0;
    if (n > best_size) {
      best = r;
      best_size = n;
    }
  }
  std::vector<int> out;
  for (size_t r = 0; r < reports.size(); ++r) {
    if (!same(r, best)) out.push_back(static_cast<int>(r));
  }
  return out;
}

std::string hex(uint64_t h) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// The first rank that still trains (not joined); 0 when all joined.
size_t first_training(const std::vector<RankReport>& reports) {
  for (size_t r = 0; r < reports.size(); ++r) {
    if (!reports[r].joined) return r;
  }
  return 0;
}

// Different numbers of forward passes (a skipped backward, an extra
// micro-step), a backward no forward prepared (backward() twice), or
// different collectives. Missing gradients are reported apart, naming the
// parameters.
void check_same_iteration(const std::vector<RankReport>& reports, const ErrorContext& here) {
  // A rank that joined (Join) shadows the others: its count of forward
  // passes is its own, and it runs no backward.
  int32_t fewest = reports[first_training(reports)].forwards;
  for (const auto& r : reports) {
    if (!r.joined) fewest = std::min(fewest, r.forwards);
  }
  std::vector<int> ahead, stray;
  for (int r = 0; r < static_cast<int>(reports.size()); ++r) {
    if (reports[r].joined) continue;
    if (reports[r].forwards != fewest) ahead.push_back(r);
    if (reports[r].stray_after >= 0) stray.push_back(r);
  }
  bool same_tally = true;
  for (const auto& r : reports) {
    same_tally = same_tally && r.tally.count == reports[0].tally.count &&
                 r.tally.hash == reports[0].tally.hash;
  }
  if (ahead.empty() && stray.empty() && same_tally) return;  // the usual case: no strings built
  const std::string nothing_written = "\nNo gradient was averaged or written in this iteration.";
  if (!ahead.empty()) {
    throw InvalidArgument(
        here.about(ahead),
        "the ranks reached this backward after different numbers of forward passes:" +
            grouped(
                reports, [](const RankReport& r) { return r.forwards; },
                [](int32_t v) { return std::to_string(v) + " forward passes"; }) +
            "\n" + rank_list(ahead) +
            " ran a forward whose backward() was skipped, or an extra "
            "(micro-)step, so this backward is paired with another iteration on the other ranks." +
            nothing_written +
            " Every rank must run the same forward and backward passes; a forward that no "
            "backward() follows (evaluation) belongs under torch::NoGradGuard.");
  }
  if (!stray.empty()) {
    std::string detail;
    for (int r : stray) {
      detail += "\n  rank " + std::to_string(r) + ": after its forward pass #" +
                std::to_string(reports[r].stray_after);
    }
    throw InvalidArgument(
        here.about(stray),
        rank_list(stray) +
            " ran a backward() that no DDP forward prepared "
            "(backward() twice after one forward, a backward through the parameters outside "
            "the DDP forward, or through a parameter this module shares with another DDP "
            "module, whose backward ran alone):" +
            detail +
            "\nThose gradients were not averaged: that replica now differs from the others." +
            nothing_written + " Run one backward() per DDP forward.");
  }
  // Only the tallies differ.
  CollectiveMismatch mismatch(
      here.about(tally_outliers(reports)),
      "the ranks issued different collectives since the previous iteration's check "
      "(kind, reduce op, dtype, element count and order are hashed):" +
          grouped(
              reports,
              [](const RankReport& r) { return std::make_pair(r.tally.count, r.tally.hash); },
              [](const std::pair<uint64_t, uint64_t>& v) {
                return std::to_string(v.first) + " collectives, hash " + hex(v.second);
              }) +
          "\nTheir results were wrong or paired across ranks." + nothing_written +
          " Every rank must issue the same collectives in the same order; rerun with "
          "DDP_DEBUG=detail to see the first that differs, or read the flight recorder's dumps "
          "(DDP_FLIGHT_RECORDER_DIR, ddp-flight).");
  detail::flight::dump_after_error(std::string("collective mismatch: ") + mismatch.what());
  throw mismatch;
}

// Some rank's parameters got no gradient: the ranks, and this rank's
// parameters (`missing`, indices into `names`).
void check_no_missing_gradient(const std::vector<RankReport>& reports,
                               const std::vector<size_t>& missing,
                               const std::vector<std::string>& names, const ErrorContext& here) {
  const std::string where = ranks_and_parameters(reports, &RankReport::missing, missing, names);
  if (where.empty()) return;
  throw InvalidArgument(
      here.about(ranks_with(reports, &RankReport::missing)),
      "backward finished but some parameters got no gradient on rank(s) " + where +
          "\nNo gradient was averaged or written. If some parameters are unused in some "
          "iterations, construct DistributedDataParallel with find_unused_parameters(true); "
          "otherwise make the loss depend on every parameter, or list the parameter in "
          "parameters_to_ignore.");
}

// The same for parameters hinted unused (layer_drop.h) that got a gradient.
void check_hints_kept(const std::vector<RankReport>& reports, const std::vector<size_t>& broken,
                      const std::vector<std::string>& names, const ErrorContext& here) {
  const std::string where = ranks_and_parameters(reports, &RankReport::hints_broken, broken, names);
  if (where.empty()) return;
  throw InvalidArgument(
      here.about(ranks_with(reports, &RankReport::hints_broken)),
      "parameters hinted unused (hint_unused_parameters) got a gradient on rank(s) " + where +
          "\nNo gradient was averaged or written. A hint says that the next forward uses the "
          "parameter on no rank: hint only the layers that forward skips.");
}

}  // namespace

IterationStatus::IterationStatus(int64_t bitmap_len, int rank, int size)
    : bitmap_len_(bitmap_len),
      rank_(rank),
      size_(size),
      tensor_(at::zeros({bitmap_len + kSlots * size}, at::kInt)) {}

void IterationStatus::write(const RankReport& mine) {
  int32_t* slot = tensor_.data_ptr<int32_t>() + bitmap_len_ + kSlots * rank_;
  slot[0] = kMarker;
  slot[1] = mine.missing;
  slot[2] = mine.forwards;
  slot[3] = mine.stray_after;
  slot[4] = static_cast<int32_t>(mine.tally.count);
  slot[5] = static_cast<int32_t>(mine.tally.hash & 0xffffffffu);
  slot[6] = static_cast<int32_t>(mine.tally.hash >> 32);
  slot[7] = mine.joined ? 1 : 0;
  slot[8] = mine.hints_broken;
}

std::vector<RankReport> IterationStatus::read(const ErrorContext& context) const {
  std::vector<RankReport> out(size_);
  std::vector<int> garbled;
  for (int r = 0; r < size_; ++r) {
    const int32_t* slot = tensor_.data_ptr<int32_t>() + bitmap_len_ + kSlots * r;
    if (slot[0] != kMarker) garbled.push_back(r);
    RankReport& rep = out[r];
    rep.missing = slot[1];
    rep.forwards = slot[2];
    rep.stray_after = slot[3];
    rep.tally.count = static_cast<uint32_t>(slot[4]);
    rep.tally.hash = static_cast<uint32_t>(slot[5]) |
                     (static_cast<uint64_t>(static_cast<uint32_t>(slot[6])) << 32);
    rep.joined = slot[7] != 0;
    rep.hints_broken = slot[8];
  }
  if (!garbled.empty()) {
    throw CommunicationError(
        context.about(garbled),
        "the end-of-backward status exchange came "
        "back garbled (" +
            rank_list(garbled) +
            "): on some rank it met a different collective, "
            "so the ranks' collectives are out of step (a rank issued a collective the others did "
            "not, or skipped one). No gradient was written; the group's later results cannot be "
            "trusted: restart the job, with DDP_DEBUG=detail to find the first difference.");
  }
  return out;
}

IterationAgreement::IterationAgreement(int rank, int size, std::string backend)
    : rank_(rank), size_(size), context_{rank, size, std::move(backend), "", {}} {}

IterationStatus IterationAgreement::status(int64_t bitmap_len, const IterationOutcome& mine) const {
  IterationStatus status(bitmap_len, rank_, size_);
  RankReport report;
  report.missing = static_cast<int32_t>(mine.missing.size());
  report.forwards = static_cast<int32_t>(forwards_);
  report.stray_after = static_cast<int32_t>(stray_after_);
  report.tally = mine.tally;
  report.joined = mine.joined;
  report.hints_broken = static_cast<int32_t>(mine.hints_broken.size());
  status.write(report);
  return status;
}

void IterationAgreement::decide(const IterationStatus& status, const IterationOutcome& mine,
                                const std::vector<std::string>& names) {
  const std::vector<RankReport> reports = status.read(context_);
  stray_after_ = -1;
  // Equal among the ranks that train, unless this raises; a rank that
  // joined catches up, so it is in step when it trains again.
  forwards_ = reports[first_training(reports)].forwards;
  check_same_iteration(reports, context_);
  check_hints_kept(reports, mine.hints_broken, names, context_);
  check_no_missing_gradient(reports, mine.missing, names, context_);
}

}  // namespace ddp::detail
