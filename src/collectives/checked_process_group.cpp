#include "collectives/checked_process_group.h"

#include <ddp/errors.h>

#include "flight/recorder.h"

#include <ATen/ATen.h>

#include <utility>

namespace ddp::detail {
namespace {

constexpr int kFields = 6;

}  // namespace

CheckedProcessGroup::CheckedProcessGroup(ProcessGroupPtr inner)
    : ProcessGroup(inner->rank(), inner->size(), inner->timeout()), inner_(std::move(inner)) {}

std::string CheckedProcessGroup::backend_name() const {
  return inner_->backend_name() + "+checked";
}

std::string CheckedProcessGroup::unsupported_reason(const at::Tensor& tensor) const {
  return inner_->unsupported_reason(tensor);
}

bool CheckedProcessGroup::handles_device(c10::DeviceType type) const {
  return inner_->handles_device(type);
}

c10::Device CheckedProcessGroup::staging_device() const { return inner_->staging_device(); }

// Zero-copy tensors pass through check() like any other.
void CheckedProcessGroup::abort(const std::string& reason) { inner_->abort(reason); }

at::Tensor CheckedProcessGroup::allocate_zero_copy(int64_t bytes) {
  return inner_->allocate_zero_copy(bytes);
}

std::string CheckedProcessGroup::describe(const Fingerprint& f) {
  std::string s = std::string(to_string(f.kind)) + " #" + std::to_string(f.number) + " (";
  if (f.op >= 0) s += std::string(to_string(static_cast<ReduceOp>(f.op))) + ", ";
  if (f.dtype >= 0) s += std::string(c10::toString(static_cast<at::ScalarType>(f.dtype))) + ", ";
  if (f.kind != OpKind::BARRIER) {
    s += std::to_string(f.numel) + " elements";
    if (f.tensors > 1) s += " in " + std::to_string(f.tensors) + " tensors";
  }
  if (f.root >= 0) s += ", root " + std::to_string(f.root);
  return s + ")";
}

void CheckedProcessGroup::check(Fingerprint mine) {
  mine.number = ++checked_;
  // The number is not sent: the n-th check's allgather pairs the n-th
  // collective of every rank, so every rank's number is this one.
  const int64_t fields[kFields] = {
      static_cast<int64_t>(mine.kind), mine.op, mine.dtype, mine.numel, mine.tensors, mine.root};
  at::Tensor local = at::tensor(at::ArrayRef<int64_t>(fields, kFields), at::kLong);
  std::vector<at::Tensor> all;
  for (int r = 0; r < size(); ++r) all.push_back(at::empty({kFields}, at::kLong));
  inner_->allgather(all, local)->wait();

  bool same = true;
  for (int r = 0; r < size(); ++r) same = same && all[r].equal(all[0]);
  if (same) return;
  std::string report;
  for (int r = 0; r < size(); ++r) {
    auto* v = all[r].data_ptr<int64_t>();
    Fingerprint f{
        static_cast<OpKind>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[2]), v[3], v[4],
        static_cast<int>(v[5]), mine.number};
    report += "\n  rank " + std::to_string(r) + ": " + describe(f);
  }
  // The error is about the ranks that differ from the most common
  // collective (the lowest rank's among equally common ones): the same
  // ranks on every rank.
  int common = 0, most = 0;
  for (int r = 0; r < size(); ++r) {
    int n = 0;
    for (int q = 0; q < size(); ++q) n += all[q].equal(all[r]) ? 1 : 0;
    if (n > most) {
      most = n;
      common = r;
    }
  }
  ErrorContext context = error_context();
  for (int r = 0; r < size(); ++r) {
    if (!all[r].equal(all[common])) context.peers.push_back(r);
  }
  CollectiveMismatch mismatch(std::move(context),
                              "the ranks issued different collectives "
                              "(DDP_DEBUG=detail check):" +
                                  report +
                                  "\nEvery rank must issue the same collectives, in the same "
                                  "order, on tensors of the same dtype and size.");
  detail::flight::dump_after_error(std::string("collective mismatch: ") + mismatch.what());
  throw mismatch;
}

WorkPtr CheckedProcessGroup::do_allreduce(at::Tensor tensor, ReduceOp op) {
  check({OpKind::ALLREDUCE, static_cast<int>(op), static_cast<int>(tensor.scalar_type()),
         tensor.numel(), 1, -1});
  return inner_->allreduce(tensor, op);
}

WorkPtr CheckedProcessGroup::do_allreduce_coalesced(std::vector<at::Tensor> tensors, ReduceOp op) {
  int64_t numel = 0;
  for (const auto& t : tensors) numel += t.numel();
  check({OpKind::ALLREDUCE_COALESCED, static_cast<int>(op),
         static_cast<int>(tensors[0].scalar_type()), numel, static_cast<int64_t>(tensors.size()),
         -1});
  return inner_->allreduce_coalesced(std::move(tensors), op);
}

WorkPtr CheckedProcessGroup::do_broadcast(at::Tensor tensor, int root) {
  check({OpKind::BROADCAST, -1, static_cast<int>(tensor.scalar_type()), tensor.numel(), 1, root});
  return inner_->broadcast(tensor, root);
}

WorkPtr CheckedProcessGroup::do_allgather(std::vector<at::Tensor> outputs, at::Tensor input) {
  check({OpKind::ALLGATHER, -1, static_cast<int>(input.scalar_type()), input.numel(), 1, -1});
  return inner_->allgather(std::move(outputs), std::move(input));
}

WorkPtr CheckedProcessGroup::do_reduce_scatter(at::Tensor output, std::vector<at::Tensor> inputs,
                                               ReduceOp op) {
  check({OpKind::REDUCE_SCATTER, static_cast<int>(op), static_cast<int>(output.scalar_type()),
         output.numel(), 1, -1});
  return inner_->reduce_scatter(std::move(output), std::move(inputs), op);
}

WorkPtr CheckedProcessGroup::do_barrier() {
  check({OpKind::BARRIER, -1, -1, 0, 0, -1});
  return inner_->barrier();
}

}  // namespace ddp::detail
