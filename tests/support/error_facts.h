// What a caught error is, as one line of facts, for the shell tests: a test
// program prints it right after the error's message, and the script checks
// the facts (tests/support/tap.sh, ddp_error) rather than the sentence:
//
//   ddp error facts: type=TimeoutError rank=0 world=2 backend=gloo operation=allreduce peers=1,2
//
// type: the most derived ddp type (CollectiveMismatch, TimeoutError,
// EarlyTermination, CheckpointError, InvalidArgument, CommunicationError,
// Error); the rest: its ErrorContext (ddp/errors.h), an unknown part as the
// context leaves it (rank=-1, world=0, backend= and operation= empty), no
// peers as "none". Nothing is printed for an exception that is no
// ddp::Error.
//
//   } catch (const std::exception& e) {
//     std::cerr << e.what() << std::endl;
//     ddp::testing::print_error_facts(std::cerr, e);
//   }
#pragma once

#include <ddp/errors.h>

#include <exception>
#include <ostream>
#include <string>

namespace ddp::testing {

inline void print_error_facts(std::ostream& out, const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  if (error == nullptr) return;
  // Subtypes before the types they derive from.
  const char* type = dynamic_cast<const CollectiveMismatch*>(error) ? "CollectiveMismatch"
                     : dynamic_cast<const TimeoutError*>(error)     ? "TimeoutError"
                     : dynamic_cast<const EarlyTermination*>(error) ? "EarlyTermination"
                     : dynamic_cast<const CheckpointError*>(error)  ? "CheckpointError"
                     : dynamic_cast<const InvalidArgument*>(error)  ? "InvalidArgument"
                     : dynamic_cast<const CommunicationError*>(error) ? "CommunicationError"
                                                                      : "Error";
  const ErrorContext& c = error->context();
  std::string peers;
  for (int p : c.peers) peers += (peers.empty() ? "" : ",") + std::to_string(p);
  out << "ddp error facts: type=" << type << " rank=" << c.rank << " world=" << c.world_size
      << " backend=" << c.backend << " operation=" << c.operation
      << " peers=" << (peers.empty() ? "none" : peers) << std::endl;
}

}  // namespace ddp::testing
