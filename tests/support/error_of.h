// What a call throws, for tests of errors: the message of the exception of
// type E (default InvalidArgument) that `f` throws, "no error" when it
// returns, "wrong exception: ..." for another. Catching all keeps the ranks
// of a multi-rank test in step when one of them fails such a check.
#pragma once

#include <ddp/errors.h>

#include <exception>
#include <string>
#include <utility>

namespace ddp::testing {

template <typename E = InvalidArgument, typename F>
std::string error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception: ") + e.what();
  }
  return "no error";
}

}  // namespace ddp::testing
