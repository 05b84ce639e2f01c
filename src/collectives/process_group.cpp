// Argument validation shared by every backend: a misuse is reported on the
// caller's thread, naming the rank, the operation and the argument, before
// anything is sent.
#include <ddp/process_group.h>

#include <ddp/errors.h>

#include "collectives/issued_log.h"
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
    : rank_(rank),
      size_(size),
      timeout_(timeout),
      issued_(std::make_unique<detail::IssuedLog>()),
      staging_order_(std::make_unique<detail::StagingOrder>()) {
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

bool ProcessGroup::reads_inputs_on_queue() const { return false; }

detail::Staging ProcessGroup::staging_for(const at::Tensor& tensor) const {
  return detail::Staging(tensor.device().type(), staging_device(), reads_inputs_on_queue(),
                         timeout());
}

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

// A record that no Work took (the group handed back a Work made by one of
// its parts): `work` carries it from now on, started now, finished with it.
void carry_flight_record(uint64_t record, const WorkPtr& work) {
  if (record == 0) return;
  detail::flight::started(record, detail::flight::now_ticks());
  Work* w = work.get();  // the callback runs on this Work: it is alive then
  work->on_complete([w, record] {
    detail::flight::finished(record, w->exception(),
                             w->completion_time().time_since_epoch().count());
  });
}

// A failed Work when a copy back broke `group` (detail::StagingOrder), else null.
WorkPtr refused(const ProcessGroup& group, const detail::StagingOrder& order, const char* op) {
  return order.broken() ? order.refusal(group.error_context(op)) : nullptr;
}

std::string nth(const char* name, size_t i) {
  return std::string(name) + "[" + std::to_string(i) + "]";
}

}  // namespace

WorkPtr ProcessGroup::allreduce(at::Tensor tensor, ReduceOp op) {
  Checker check(*this, "allreduce");
  check.tensor(tensor, "tensor");
  check.op(op, tensor);
  const detail::IssuedLog::Collective issued{OpKind::ALLREDUCE, static_cast<int64_t>(op),
                                             static_cast<int64_t>(tensor.scalar_type()),
                                             tensor.numel(), -1};
  detail::flight::PendingRecord flight(issued_->record(issued));
  WorkPtr work = refused(*this, *staging_order_, "allreduce");
  if (work) {
    // A copy back broke the group: nothing is issued.
  } else if (check.staged(tensor)) {
    detail::Staging staging = staging_for(tensor);
    at::Tensor staged = staging.in(tensor);
    work = staging.issue([&] { return do_allreduce(staged, op); }, {tensor}, {staged},
                         *staging_order_);
  } else {
    work = staging_order_->in_order(do_allreduce(std::move(tensor), op), timeout());
  }
  carry_flight_record(flight.settle(), work);
  issued_->note(issued);  // after: a refused call is not counted
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
  const detail::IssuedLog::Collective issued{OpKind::ALLREDUCE_COALESCED, static_cast<int64_t>(op),
                                             static_cast<int64_t>(tensors[0].scalar_type()), total,
                                             static_cast<int64_t>(tensors.size())};
  detail::flight::PendingRecord flight(issued_->record(issued));
  WorkPtr work = refused(*this, *staging_order_, "allreduce_coalesced");
  if (work) {
    // A copy back broke the group: nothing is issued.
  } else if (check.staged(tensors)) {
    detail::Staging staging = staging_for(tensors[0]);
    auto staged = staging.in(tensors);
    work = staging.issue([&] { return do_allreduce_coalesced(staged, op); }, std::move(tensors),
                         staged, *staging_order_);
  } else {
    work = staging_order_->in_order(do_allreduce_coalesced(std::move(tensors), op), timeout());
  }
  carry_flight_record(flight.settle(), work);
  issued_->note(issued);  // after: a refused call is not counted
  return work;
}

WorkPtr ProcessGroup::broadcast(at::Tensor tensor, int root) {
  Checker check(*this, "broadcast");
  check.tensor(tensor, "tensor");
  if (root < 0 || root >= size()) {
    check.fail("root " + std::to_string(root) + " is outside [0, " + std::to_string(size()) + ")");
  }
  const detail::IssuedLog::Collective issued{
      OpKind::BROADCAST, -1, static_cast<int64_t>(tensor.scalar_type()), tensor.numel(), root};
  detail::flight::PendingRecord flight(issued_->record(issued));
  WorkPtr work = refused(*this, *staging_order_, "broadcast");
  if (work) {
    // A copy back broke the group: nothing is issued.
  } else if (check.staged(tensor)) {
    detail::Staging staging = staging_for(tensor);
    at::Tensor staged = staging.in(tensor);
    work = staging.issue([&] { return do_broadcast(staged, root); }, {tensor}, {staged},
                         *staging_order_);
  } else {
    work = staging_order_->in_order(do_broadcast(std::move(tensor), root), timeout());
  }
  carry_flight_record(flight.settle(), work);
  issued_->note(issued);  // after: a refused call is not counted
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
  const detail::IssuedLog::Collective issued{
      OpKind::ALLGATHER, -1, static_cast<int64_t>(input.scalar_type()), input.numel(), -1};
  detail::flight::PendingRecord flight(issued_->record(issued));
  WorkPtr work = refused(*this, *staging_order_, "allgather");
  if (work) {
    // A copy back broke the group: nothing is issued.
  } else if (check.staged(outputs) || check.staged(input)) {
    detail::Staging staging = staging_for(input);
    staging.require_one_device(outputs);
    auto staged = staging.out(outputs);
    at::Tensor staged_input = staging.in(input);
    work = staging.issue([&] { return do_allgather(staged, staged_input); }, std::move(outputs),
                         staged, *staging_order_);
  } else {
    work = staging_order_->in_order(do_allgather(std::move(outputs), std::move(input)), timeout());
  }
  carry_flight_record(flight.settle(), work);
  issued_->note(issued);  // after: a refused call is not counted
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
  const detail::IssuedLog::Collective issued{OpKind::REDUCE_SCATTER, static_cast<int64_t>(op),
                                             static_cast<int64_t>(output.scalar_type()),
                                             output.numel(), -1};
  detail::flight::PendingRecord flight(issued_->record(issued));
  WorkPtr work = refused(*this, *staging_order_, "reduce_scatter");
  if (work) {
    // A copy back broke the group: nothing is issued.
  } else if (check.staged(inputs) || check.staged(output)) {
    detail::Staging staging = staging_for(output);
    staging.require_one_device(inputs);
    auto staged = staging.in(inputs);
    at::Tensor staged_output = staging.out(output);
    work = staging.issue([&] { return do_reduce_scatter(staged_output, staged, op); }, {output},
                         {staged_output}, *staging_order_);
  } else {
    work = staging_order_->in_order(do_reduce_scatter(std::move(output), std::move(inputs), op),
                                    timeout());
  }
  carry_flight_record(flight.settle(), work);
  issued_->note(issued);  // after: a refused call is not counted
  return work;
}

WorkPtr ProcessGroup::barrier() {
  const detail::IssuedLog::Collective issued{OpKind::BARRIER, -1, -1, 0, -1};
  detail::flight::PendingRecord flight(issued_->record(issued));
  WorkPtr work = refused(*this, *staging_order_, "barrier");
  if (!work) work = staging_order_->in_order(do_barrier(), timeout());
  carry_flight_record(flight.settle(), work);
  issued_->note(issued);  // after: a refused call is not counted
  return work;
}

}  // namespace ddp
