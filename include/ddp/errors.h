// Error types. The policy (docs/errors.md): every failure is an exception whose
// text says what failed, on which rank, the values that disagree, and what to
// do. Misuse and bad input (fix your program) are apart from communication
// failures and timeouts (something outside the program went wrong).
#pragma once

#include <stdexcept>
#include <string>

namespace ddp {

// Base of every exception ddp throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
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
