// The status allreduce the Reducer runs at the end of every synchronized
// backward: one small int32 tensor carrying the used-parameter bitmap and, in
// a slot per rank, what that rank did this iteration. Every rank writes only
// its own slot (the others add zeros), so after the SUM every rank holds
// every rank's report exactly, and all of them take the same decision. This
// is how misuse that would otherwise pair one rank's collectives with
// another iteration's, or with different collectives, becomes an error on
// every rank before backward() returns, at no extra collective.
#pragma once

#include <ddp/process_group.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ddp::detail {

struct RankReport {
  int32_t missing = 0;        // parameters that got no gradient this pass
  int32_t forwards = 0;       // forward passes so far, no_sync ones included (wraps)
  int32_t stray_after = -1;   // >= 0: a backward() no forward prepared ran after this forward
  ProcessGroup::Tally tally;  // collectives issued on the group since the last status
  bool joined = false;        // a rank out of inputs, shadowing the others (Join)
  int32_t hints_broken = 0;   // parameters hinted unused that got a gradient (layer_drop.h)
};

class IterationStatus {
 public:
  IterationStatus(int64_t bitmap_len, int rank, int size);
  // The tensor to allreduce (SUM); its first bitmap_len entries are the bitmap.
  at::Tensor& tensor() { return tensor_; }
  const at::Tensor& tensor() const { return tensor_; }
  at::Tensor bitmap() const { return tensor_.narrow(0, 0, bitmap_len_); }
  void write(const RankReport& mine);
  // Every rank's report, after the allreduce. CommunicationError when some
  // slot lacks its marker: the status met a different collective on some
  // rank, so the ranks' collectives are out of step.
  std::vector<RankReport> read() const;

 private:
  const int64_t bitmap_len_;
  const int rank_, size_;
  at::Tensor tensor_;
};

// The first rank that still trains (not joined); 0 when all joined.
size_t first_training(const std::vector<RankReport>& reports);

// Raises on every rank (all see the same reports) when the ranks did not run
// the same iteration: different numbers of forward passes (a skipped
// backward, an extra micro-step), a backward no forward prepared (backward()
// twice), or different collectives. Missing gradients are the Reducer's to
// report, since it names the parameters.
void check_same_iteration(const std::vector<RankReport>& reports, int rank);

// Raises on every rank when some rank's parameters got no gradient, naming
// the ranks and, on each of them, its own: `missing` (indices into `names`).
void check_no_missing_gradient(const std::vector<RankReport>& reports,
                               const std::vector<size_t>& missing,
                               const std::vector<std::string>& names, int rank);

// The same for parameters hinted unused (layer_drop.h) that got a gradient:
// `broken` are this rank's.
void check_hints_kept(const std::vector<RankReport>& reports, const std::vector<size_t>& broken,
                      const std::vector<std::string>& names, int rank);

}  // namespace ddp::detail
