// Error types and the one shape every message has. The policy
// (docs/errors.md): every failure is an exception whose text says what
// failed, on which rank, the values that disagree, and what to do. Misuse and
// bad input (fix your program) are apart from communication failures and
// timeouts (something outside the program went wrong).
//
// Every ddp::Error is built from an ErrorContext (where it arose) and a
// problem (what went wrong, and what to do), and formats its message the
// same way:
//
//   ddp: rank 1 of 4 [gloo]: allreduce: tensors[1] has dtype Double but ...
//   ^^^^ ^^^^^^^^^^^^^^^^^^  ^^^^^^^^^  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
//        rank, world, backend operation problem (then the remedy, if apart)
//
// Parts that are not known are left out ("ddp: rank 1: ...", "ddp: ...").
// A program (or a test) reads the facts from context() rather than parsing
// the sentence.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ddp {

// Where an error arose. Every field may be left unknown.
struct ErrorContext {
  // The rank that raises it. Default: -1 (not known: no group yet).
  int rank = -1;
  // The size of its group. Default: 0 (not known).
  int world_size = 0;
  // The group's backend, as ProcessGroup::backend_name() says it
  // ("gloo", "hierarchical(shm+gloo)"). Default: "" (no group).
  std::string backend;
  // What was being done: a collective ("allreduce"), a call
  // ("register_comm_hook"), a phase ("rendezvous"), an option or variable
  // ("DDP_TIMELINE"). Default: "".
  std::string operation;
  // Other ranks the error is about: a peer that died or stayed silent, the
  // ranks that disagree, the rank at fault. Default: none.
  std::vector<int> peers;

  // This context, about the ranks `others` (its peers).
  ErrorContext about(std::vector<int> others) const {
    ErrorContext out = *this;
    out.peers = std::move(others);
    return out;
  }
};

// "rank 1 of 4 [gloo]: allreduce" — the context as messages start with it
// (without "ddp: "); "" when nothing is known.
std::string format_context(const ErrorContext& context);

// Base of every exception ddp throws.
class Error : public std::runtime_error {
 public:
  // what() = "ddp: " + format_context(context) + ": " + problem, then
  // " " + remedy when one is given.
  Error(ErrorContext context, const std::string& problem, const std::string& remedy = {});
  // An error with no context known: what() = "ddp: " + problem.
  explicit Error(const std::string& problem);

  const ErrorContext& context() const noexcept { return context_; }
  // What went wrong, without the context: the message after its prefix.
  const std::string& problem() const noexcept { return problem_; }
  // What to do, when the thrower gave it apart from the problem; else "".
  const std::string& remedy() const noexcept { return remedy_; }

 private:
  ErrorContext context_;
  std::string problem_;
  std::string remedy_;
};

// Bad input or misuse: wrong arguments, malformed environment, tensors or
// models that disagree across ranks. Retrying will not help.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A collective or rendezvous failed because a peer or the network did: a
// connection closed, a rank died. The group that raised it is broken; every
// later operation on it fails with the same cause.
class CommunicationError : public Error {
 public:
  using Error::Error;
};

// A blocking operation did not finish within its timeout. Also breaks the
// group when raised from a collective.
class TimeoutError : public CommunicationError {
 public:
  using CommunicationError::CommunicationError;
};

// Collectives whose arguments disagree across ranks (size, dtype, op, kind),
// detected before anything is mixed: always on shm, on every backend by the
// DDP_DEBUG=detail fingerprint check (docs/errors.md).
class CollectiveMismatch : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// Join with throw_on_early_termination: a rank ran out of inputs. Every rank
// raises it in the same iteration.
class EarlyTermination : public Error {
 public:
  using Error::Error;
};

// A checkpoint (ddp/checkpoint.h) cannot be written or read, or does not fit
// what it is loaded into: rank 0's OS error, a damaged file, another model.
// The message names the path or the first parameter that differs. Raised on
// every rank alike.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

}  // namespace ddp
