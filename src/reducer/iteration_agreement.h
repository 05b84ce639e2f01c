// What the ranks agree on at the end of every synchronized backward, in one
// object: what this rank reports (forward passes, stray backwards, missing
// gradients, broken hints, the collectives it issued, whether it joined),
// the one small allreduce that carries every rank's report, and the decision
// all ranks take from the same reports: go on, or raise the same error.
//
// The wire: one int32 tensor, the used-parameter bitmap, then a slot per
// rank. Every rank writes only its own slot (the others add zeros), so after
// the SUM every rank holds every rank's report exactly. This is how misuse
// that would otherwise pair one rank's collectives with another iteration's,
// or with different collectives, becomes an error on every rank before
// backward() returns, at no extra collective.
//
// Not thread-safe: the Reducer calls it with its mutex held.
#pragma once

#include <ddp/errors.h>
#include <ddp/process_group.h>

#include "collectives/issued_log.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ddp::detail {

// One rank's report, as every rank reads it after the allreduce.
struct RankReport {
  int32_t missing = 0;             // parameters that got no gradient this pass
  int32_t forwards = 0;            // forward passes so far, no_sync ones included (wraps)
  int32_t stray_after = -1;        // >= 0: a backward() no forward prepared ran after this forward
  detail::IssuedLog::Tally tally;  // collectives issued on the group since the last status
  bool joined = false;             // a rank out of inputs, shadowing the others (Join)
  int32_t hints_broken = 0;        // parameters hinted unused that got a gradient (layer_drop.h)
};

// The tensor the ranks allreduce (SUM).
class IterationStatus {
 public:
  IterationStatus(int64_t bitmap_len, int rank, int size);
  at::Tensor& tensor() { return tensor_; }
  const at::Tensor& tensor() const { return tensor_; }
  // The first bitmap_len entries: 1 where a parameter was used.
  at::Tensor bitmap() const { return tensor_.narrow(0, 0, bitmap_len_); }
  void write(const RankReport& mine);
  // Every rank's report, after the allreduce. CommunicationError (in
  // `context`, naming the ranks) when some slot lacks its marker: the status
  // met a different collective on some rank, so the ranks' collectives are
  // out of step.
  std::vector<RankReport> read(const ErrorContext& context) const;

 private:
  const int64_t bitmap_len_;
  const int rank_, size_;
  at::Tensor tensor_;
};

// What this rank has to say about the iteration that ends, besides the
// counts the agreement keeps itself. Indices are into the parameter names.
struct IterationOutcome {
  std::vector<size_t> missing;       // got no gradient (empty on a joined rank)
  std::vector<size_t> hints_broken;  // hinted unused, got a gradient
  detail::IssuedLog::Tally tally;    // the group's, since the last status
  bool joined = false;               // Join's shadow iteration
};

class IterationAgreement {
 public:
  // `backend` (ProcessGroup::backend_name()) only names the group in errors.
  IterationAgreement(int rank, int size, std::string backend = {});

  // A forward pass that counts: every synchronized one, and the no_sync ones
  // unless inputs are uneven (Join), where ranks legitimately differ.
  void count_forward() { ++forwards_; }
  // A backward() that no DDP forward prepared delivered a gradient.
  void note_stray_backward() {
    if (stray_after_ < 0) stray_after_ = forwards_;
  }
  // >= 0 while a stray backward has not been reported in a status yet: the
  // forward pass it followed (for a warning at destruction).
  int64_t unreported_stray() const { return stray_after_; }

  // The status to allreduce: a bitmap of bitmap_len entries for the caller
  // to fill, and this rank's report.
  IterationStatus status(int64_t bitmap_len, const IterationOutcome& mine) const;

  // After the allreduce: raises on every rank alike (all read the same
  // reports) when the ranks did not run the same iteration: different
  // numbers of forward passes, a backward no forward prepared, different
  // collectives (CollectiveMismatch), a hint broken, a gradient missing.
  // Either way the counts restart in step, so a program that catches the
  // error can go on, and a rank that joined catches up with the others.
  // Errors name this rank's parameters by `names`.
  void decide(const IterationStatus& status, const IterationOutcome& mine,
              const std::vector<std::string>& names);

 private:
  const int rank_, size_;
  const ErrorContext context_;  // this rank's, for the errors decide() raises
  int64_t forwards_ = 0;
  int64_t stray_after_ = -1;
};

}  // namespace ddp::detail
