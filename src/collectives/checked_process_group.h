// DDP_DEBUG=detail: a ProcessGroup that, before each collective, allgathers
// a fingerprint of it (kind, reduce op, dtype, element counts, root; its
// number on the group goes into the error) over
// the wrapped group and compares them. On disagreement every rank raises
// CollectiveMismatch listing what each rank issued; nothing is mixed.
// It costs one small blocking allgather per collective: a debug mode.
#pragma once

#include <ddp/process_group.h>

#include <atomic>

namespace ddp::detail {

class CheckedProcessGroup : public ProcessGroup {
 public:
  explicit CheckedProcessGroup(ProcessGroupPtr inner);

  std::string backend_name() const override;
  std::string unsupported_reason(const at::Tensor& tensor) const override;
  bool handles_device(c10::DeviceType type) const override;  // the inner group's
  c10::Device staging_device() const override;               // the inner group's
  at::Tensor allocate_zero_copy(int64_t bytes) override;
  void abort(const std::string& reason) override;  // the inner group's

 protected:
  WorkPtr do_allreduce(at::Tensor tensor, ReduceOp op) override;
  WorkPtr do_allreduce_coalesced(std::vector<at::Tensor> tensors, ReduceOp op) override;
  WorkPtr do_broadcast(at::Tensor tensor, int root) override;
  WorkPtr do_allgather(std::vector<at::Tensor> outputs, at::Tensor input) override;
  WorkPtr do_reduce_scatter(at::Tensor output, std::vector<at::Tensor> inputs,
                            ReduceOp op) override;
  WorkPtr do_barrier() override;

 private:
  struct Fingerprint {
    OpKind kind;
    int op = -1;        // ReduceOp, or -1
    int dtype = -1;     // at::ScalarType, or -1
    int64_t numel = 0;  // per rank, summed over tensors
    int64_t tensors = 0;
    int root = -1;
    int64_t number = 0;  // the collective's number on this group, from 1, the
                         // same on every rank (for the error: which one)
  };
  // Throws CollectiveMismatch on every rank when the fingerprints differ.
  void check(Fingerprint mine);  // numbers it
  static std::string describe(const Fingerprint& f);

  const ProcessGroupPtr inner_;
  std::atomic<int64_t> checked_{0};  // collectives checked so far
};

}  // namespace ddp::detail
