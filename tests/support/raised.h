// What a call raises, as facts, for tests of errors: whether it threw the
// exception type E (default InvalidArgument) and the ErrorContext it carries
// (rank, group, operation, peers: ddp/errors.h). Tests check the type and
// the facts, never the sentence, so a reworded message breaks no test; the
// message is kept only to print when a check fails:
//
//   Raised r = raised<CollectiveMismatch>([&] { pg->allreduce(t); });
//   ASSERT_TRUE(r) << r;
//   EXPECT_EQ(r.context.operation, "allreduce") << r;
//
// Catching everything keeps the ranks of a multi-rank test in step when one
// of them fails such a check.
#pragma once

#include <ddp/errors.h>
#include <ddp/process_group.h>

#include <exception>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace ddp::testing {

struct Raised {
  // "" when the call threw E; else "no error" or "wrong exception: <what>".
  std::string wrong;
  // The thrown error's facts (empty unless it threw E).
  ErrorContext context;
  // The full message: for failure output only.
  std::string what;

  explicit operator bool() const { return wrong.empty(); }
  // Whether the message carries `fact`: a name or a value it must show (a
  // parameter's name, a variable and its value, a count, a path), never a
  // phrase of its sentence.
  bool mentions(const std::string& fact) const { return what.find(fact) != std::string::npos; }
  // For a failed check's output: the message, or why there is none.
  const std::string& text() const { return wrong.empty() ? what : wrong; }
  // Whether this rank of `group` raised it: the context's rank, world size
  // and backend are the group's.
  bool on(const ProcessGroup& group) const {
    return context.rank == group.rank() && context.world_size == group.size() &&
           context.backend == group.backend_name();
  }
};

inline std::ostream& operator<<(std::ostream& out, const Raised& r) { return out << r.text(); }

template <typename E = InvalidArgument, typename F>
Raised raised(F&& f) {
  Raised r;
  try {
    std::forward<F>(f)();
    r.wrong = "no error";
  } catch (const E& e) {
    r.context = e.context();
    r.what = e.what();
  } catch (const std::exception& e) {
    r.wrong = std::string("wrong exception: ") + e.what();
  }
  return r;
}

}  // namespace ddp::testing
