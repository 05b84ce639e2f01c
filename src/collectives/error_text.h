// How a ddp error cites an exception it wraps (a failure inside an
// operation, a set-up error another rank passed on through the store): a
// ddp::Error by its context and problem, without its own "ddp: " (the new
// message has one); any other exception (libtorch's, the OS's, a
// library's) by what().
#pragma once

#include <ddp/errors.h>

#include <exception>
#include <string>
#include <vector>

namespace ddp::detail {

inline std::string cited(const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  if (error == nullptr) return e.what();
  const std::string where = format_context(error->context());
  std::string text = where.empty() ? error->problem() : where + ": " + error->problem();
  if (!error->remedy().empty()) text += " " + error->remedy();
  return text;
}

// The other ranks a wrapped exception is about (ErrorContext::peers), so
// that the error wrapping it names them too; none for a non-ddp exception.
inline std::vector<int> peers_of(const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  return error == nullptr ? std::vector<int>{} : error->context().peers;
}

// A failure inside the operation of `context` (a Work's), as the error
// (type E) that operation fails with: its context, naming the peers the
// wrapped exception names, and that exception cited.
template <typename E = Error>
E failure_in(const ErrorContext& context, const std::exception& e) {
  return E(context.about(peers_of(e)), cited(e));
}

}  // namespace ddp::detail
