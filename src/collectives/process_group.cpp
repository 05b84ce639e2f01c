// Argument validation shared by every backend: a misuse is reported on the
// caller's thread, naming the rank, the operation and the argument, before
// anything is sent.
#include <ddp/mutex.h>
#include <ddp/process_group.h>

#include <ddp/errors.h>

#include "collectives/staging.h"
#include "flight/clock.h"
#include "flight/recorder.h"

#include <ATen/ATen.h>
#include <c10/core/ScalarType.h>

#include <sstream>

namespace ddp {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
      return "SUM";
    case ReduceOp::AVG:
      return "AVG";
    case ReduceOp::MIN:
      return "MIN";
    case ReduceOp::MAX:
      return "MAX";
    case ReduceOp::PRODUCT:
      return "PRODUCT";
  }
  return "?";
}

const char* to_string(OpKind kind) {
  switch (kind) {
    case OpKind::ALLREDUCE:
      return "allreduce";
    case OpKind::ALLREDUCE_COALESCED:
      return "allreduce_coalesced";
    case OpKind::BROADCAST:
      return "broadcast";
    case OpKind::ALLGATHER:
      return "allgather";
    case OpKind::REDUCE_SCATTER:
      return "reduce_scatter";
    case OpKind::BARRIER:
      return "barrier";
  }
  return "?";
}

ProcessGroup::ProcessGroup(int rank, int size, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), timeout_(timeout) {
  if (size < 1) {
    throw InvalidArgument("process group size must be >= 1, got " + std::to_string(size));
  }
  if (rank < 0 || rank >= size) {
    throw InvalidArgument("rank " + std::to_string(rank) + " is outside [0, " +
                          std::to_string(size) + ") for a group of " + std::to_string(size) +
                          " ranks");
  }
  if (timeout.count() <= 0) {
    throw InvalidArgument("process group timeout must be positive, got " +
                          std::to_string(timeout.count()) + " ms");
  }
}

ProcessGroup::~ProcessGroup() = default;

std::string ProcessGroup::unsupported_reason(const at::Tensor&) const { return ""; }

bool ProcessGroup::handles_device(c10::DeviceType type) const {
  return type == c10::DeviceType::CPU;
}

c10::Device ProcessGroup::staging_device() const { return c10::Device(c10::DeviceType::CPU); }

at::Tensor ProcessGroup::allocate_zero_copy(int64_t) { return at::Tensor(); }

void ProcessGroup::abort(const std::string&) {}

ErrorContext ProcessGroup::error_context(std::string operation) const {
  return ErrorContext{rank_, size_, backend_name(), std::move(operation), {}};
}

std::string ProcessGroup::where() const { return format_context(error_context()); }

namespace {

class Checker {
 public:
  Checker(const ProcessGroup& group, const char* op)
      : group_(group), context_(group.error_context(op)) {}

  [[noreturn]] void fail(const std::string& what) const { throw InvalidArgument(context_, what); }

  void tensor(const at::Tensor& t, const std::string& name) const {
    if (!t.defined()) fail(name + " is an undefined tensor");
    if (t.layout() != at::kStrided) fail(name + " must be a dense (strided) tensor");
    if (!t.is_contiguous()) fail(name + " must be contiguous; call .contiguous() first");
    // A tensor to be staged is checked as its staged copy will be.
    std::string why = group_.unsupported_reason(
        staged(t) ? at::empty({0}, t.options().device(group_.staging_device())) : t);
    if (!why.empty()) fail(name + " " + why);
  }

  // A CPU or CUDA tensor on a device the backend does not handle.
  bool staged(const at::Tensor& t) const {
    return (t.device().is_cpu() || t.device().is_cuda()) &&
           !group_.handles_device(t.device().type());
  }
  bool staged(const std::vector<at::Tensor>& ts) const {
    for (const auto& t : ts) {
      if (staged(t)) return true;
    }
    return false;
  }

  void same(const at::Tensor& t, const at::Tensor& ref, const std::string& name,
            const std::string& ref_name) const {
    if (t.scalar_type() != ref.scalar_type()) {
      fail(name + " has dtype " + c10::toString(t.scalar_type()) + " but " + ref_name + " has " +
           c10::toString(ref.scalar_type()));
    }
    if (t.numel() != ref.numel()) {
      fail(name + " has " + std::to_string(t.numel()) + " elements but " + ref_name + " has " +
           std::to_string(ref.numel()));
    }
  }

  void op(ReduceOp op, const at::Tensor& t) const {
    if (op == ReduceOp::AVG && !at::isFloatingType(t.scalar_type())) {
      fail(std::string("AVG is defined for floating dtypes only, got ") +
           c10::toString(t.scalar_type()) + "; use SUM and divide");
    }
  }

  void count(size_t got, size_t want, const std::string& name) const {
    if (got != want) {
      fail(name + " has " + std::to_string(got) + " tensors, expected one per rank (" +
           std::to_string(want) + ")");
    }
  }

 private:
  const ProcessGroup& group_;
  const ErrorContext context_;
};

std::string nth(const char* name, size_t i) {
  return std::string(name) + "[" + std::to_string(i) + "]";
}

}  // namespace

WorkPtr ProcessGroup::allreduce(at::Tensor tensor, ReduceOp op) {
  Checker check(*this, "allreduce");
  check.tensor(tensor, "tensor");
  check.op(op, tensor);
  const Issued issued{OpKind::ALLREDUCE, static_cast<int64_t>(op),
                      static_cast<int64_t>(tensor.scalar_type()), tensor.numel(), -1};
  detail::flight::PendingRecord flight(record_flight(issued));
  WorkPtr work;
  if (check.staged(tensor)) {
    at::Tensor staged = detail::staged_copy(tensor, staging_device(), /*copy=*/true);
    work = detail::copy_back_on_completion(do_allreduce(staged, op), {tensor}, {staged}, timeout());
  } else {
    work = do_allreduce(std::move(tensor), op);
  }
  flight.settle(work);
  note_issued(issued);  // after: a refused call is not counted
  return work;
}

WorkPtr ProcessGroup::allreduce_coalesced(std::vector<at::Tensor> tensors, ReduceOp op) {
  Checker check(*this, "allreduce_coalesced");
  if (tensors.empty()) check.fail("no tensors given");
  for (size_t i = 0; i < tensors.size(); ++i) {
    check.tensor(tensors[i], nth("tensors", i));
    if (tensors[i].scalar_type() != tensors[0].scalar_type()) {
      check.fail(nth("tensors", i) + " has dtype " + c10::toString(tensors[i].scalar_type()) +
                 " but tensors[0] has " + c10::toString(tensors[0].scalar_type()) +
                 "; coalesce tensors of one dtype");
    }
  }
  check.op(op, tensors[0]);
  int64_t total = 0;
  for (const auto& t : tensors) total += t.numel();
  const Issued issued{OpKind::ALLREDUCE_COALESCED, static_cast<int64_t>(op),
                      static_cast<int64_t>(tensors[0].scalar_type()), total,
                      static_cast<int64_t>(tensors.size())};
  detail::flight::PendingRecord flight(record_flight(issued));
  WorkPtr work;
  if (check.staged(tensors)) {
    auto staged = detail::staged_copies(tensors, staging_device(), /*copy=*/true);
    work = detail::copy_back_on_completion(do_allreduce_coalesced(staged, op), std::move(tensors),
                                           staged, timeout());
  } else {
    work = do_allreduce_coalesced(std::move(tensors), op);
  }
  flight.settle(work);
  note_issued(issued);  // after: a refused call is not counted
  return work;
}

WorkPtr ProcessGroup::broadcast(at::Tensor tensor, int root) {
  Checker check(*this, "broadcast");
  check.tensor(tensor, "tensor");
  if (root < 0 || root >= size()) {
    check.fail("root " + std::to_string(root) + " is outside [0, " + std::to_string(size()) + ")");
  }
  const Issued issued{OpKind::BROADCAST, -1, static_cast<int64_t>(tensor.scalar_type()),
                      tensor.numel(), root};
  detail::flight::PendingRecord flight(record_flight(issued));
  WorkPtr work;
  if (check.staged(tensor)) {
    at::Tensor staged = detail::staged_copy(tensor, staging_device(), /*copy=*/true);
    work =
        detail::copy_back_on_completion(do_broadcast(staged, root), {tensor}, {staged}, timeout());
  } else {
    work = do_broadcast(std::move(tensor), root);
  }
  flight.settle(work);
  note_issued(issued);  // after: a refused call is not counted
  return work;
}

WorkPtr ProcessGroup::allgather(std::vector<at::Tensor> outputs, at::Tensor input) {
  Checker check(*this, "allgather");
  check.tensor(input, "input");
  check.count(outputs.size(), size(), "outputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    check.tensor(outputs[i], nth("outputs", i));
    check.same(outputs[i], input, nth("outputs", i), "input");
  }
  const Issued issued{OpKind::ALLGATHER, -1, static_cast<int64_t>(input.scalar_type()),
                      input.numel(), -1};
  detail::flight::PendingRecord flight(record_flight(issued));
  WorkPtr work;
  if (check.staged(outputs) || check.staged(input)) {
    auto staged = detail::staged_copies(outputs, staging_device(), /*copy=*/false);
    at::Tensor staged_input = detail::staged_copy(input, staging_device(), /*copy=*/true);
    work = detail::copy_back_on_completion(do_allgather(staged, staged_input), std::move(outputs),
                                           staged, timeout());
  } else {
    work = do_allgather(std::move(outputs), std::move(input));
  }
  flight.settle(work);
  note_issued(issued);  // after: a refused call is not counted
  return work;
}

WorkPtr ProcessGroup::reduce_scatter(at::Tensor output, std::vector<at::Tensor> inputs,
                                     ReduceOp op) {
  Checker check(*this, "reduce_scatter");
  check.tensor(output, "output");
  check.count(inputs.size(), size(), "inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    check.tensor(inputs[i], nth("inputs", i));
    check.same(inputs[i], output, nth("inputs", i), "output");
  }
  check.op(op, output);
  const Issued issued{OpKind::REDUCE_SCATTER, static_cast<int64_t>(op),
                      static_cast<int64_t>(output.scalar_type()), output.numel(), -1};
  detail::flight::PendingRecord flight(record_flight(issued));
  WorkPtr work;
  if (check.staged(inputs) || check.staged(output)) {
    auto staged = detail::staged_copies(inputs, staging_device(), /*copy=*/true);
    at::Tensor staged_output = detail::staged_copy(output, staging_device(), /*copy=*/false);
    work = detail::copy_back_on_completion(do_reduce_scatter(staged_output, staged, op), {output},
                                           {staged_output}, timeout());
  } else {
    work = do_reduce_scatter(std::move(output), std::move(inputs), op);
  }
  flight.settle(work);
  note_issued(issued);  // after: a refused call is not counted
  return work;
}

WorkPtr ProcessGroup::barrier() {
  const Issued issued{OpKind::BARRIER, -1, -1, 0, -1};
  detail::flight::PendingRecord flight(record_flight(issued));
  WorkPtr work = do_barrier();
  flight.settle(work);
  note_issued(issued);  // after: a refused call is not counted
  return work;
}

// Each field is mixed (splitmix64's finalizer) into the running value, so
// the order of the collectives matters, as it does on the wire. Cheap (a lock
// and a few multiplies): it runs for every collective, without DDP_DEBUG too.
void ProcessGroup::note_issued(const Issued& c) {
  const int64_t fields[] = {static_cast<int64_t>(c.kind), c.op, c.dtype, c.count, c.root};
  MutexLock lock(tally_mutex_);
  uint64_t h = tally_.hash;
  for (int64_t f : fields) {
    h ^= static_cast<uint64_t>(f) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    h ^= h >> 31;
  }
  tally_.hash = h;
  ++tally_.count;
}

uint64_t ProcessGroup::record_flight(const Issued& c) {
  const int group = flight_group_.load(std::memory_order_relaxed);
  if (group < 0) return 0;
  detail::flight::Issue issue;
  issue.issued_ticks = detail::flight::now_ticks();
  issue.group = group;
  issue.seq = flight_seq_.fetch_add(1, std::memory_order_relaxed);
  issue.kind = static_cast<uint8_t>(c.kind);
  issue.op = static_cast<int8_t>(c.op);
  issue.dtype = static_cast<int8_t>(c.dtype);
  issue.count = c.count;
  issue.root = static_cast<int32_t>(c.kind == OpKind::BROADCAST ? c.root : -1);
  return detail::flight::issue(issue);
}

void ProcessGroup::record_flights(const std::string& name) {
  if (flight_group_.load() >= 0) {
    throw InvalidArgument(error_context("record_flights('" + name + "')"),
                          "this group is already recorded");
  }
  flight_group_.store(detail::flight::add_group(name, rank(), size(), backend_name()));
}

ProcessGroup::Tally ProcessGroup::take_tally() {
  MutexLock lock(tally_mutex_);
  Tally t = tally_;
  tally_ = Tally{};
  return t;
}

}  // namespace ddp
