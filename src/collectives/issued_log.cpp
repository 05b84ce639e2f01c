#include "collectives/issued_log.h"

#include <ddp/errors.h>

#include "flight/clock.h"
#include "flight/recorder.h"

namespace ddp::detail {

// Each field is mixed (splitmix64's finalizer) into the running value, so
// the order of the collectives matters, as it does on the wire. Cheap (a lock
// and a few multiplies): it runs for every collective, without DDP_DEBUG too.
void IssuedLog::note(const Collective& c) {
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

uint64_t IssuedLog::record(const Collective& c) {
  const int group = flight_group_.load(std::memory_order_relaxed);
  if (group < 0) return 0;
  flight::Issue issue;
  issue.issued_ticks = flight::now_ticks();
  issue.group = group;
  issue.seq = flight_seq_.fetch_add(1, std::memory_order_relaxed);
  issue.kind = static_cast<uint8_t>(c.kind);
  issue.op = static_cast<int8_t>(c.op);
  issue.dtype = static_cast<int8_t>(c.dtype);
  issue.count = c.count;
  issue.root = static_cast<int32_t>(c.kind == OpKind::BROADCAST ? c.root : -1);
  return flight::issue(issue);
}

namespace {

const char* kind_code_name(uint8_t code) { return to_string(static_cast<OpKind>(code)); }
const char* op_code_name(int8_t code) { return to_string(static_cast<ReduceOp>(code)); }

}  // namespace

void IssuedLog::record_flights(const ProcessGroup& group, const std::string& name) {
  if (flight_group_.load() >= 0) {
    throw InvalidArgument(group.error_context("record_flights('" + name + "')"),
                          "this group is already recorded");
  }
  flight::name_codes({kind_code_name, op_code_name});
  flight_group_.store(flight::add_group(name, group.rank(), group.size(), group.backend_name()));
}

IssuedLog::Tally IssuedLog::take_tally() {
  MutexLock lock(tally_mutex_);
  Tally t = tally_;
  tally_ = Tally{};
  return t;
}

}  // namespace ddp::detail
