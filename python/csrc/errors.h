// ddp's errors as PyTorch's, so that Python sees the exception type it
// expects and ddp's message (rank, peer, collective, what to do):
//   ddp::InvalidArgument (misuse, CollectiveMismatch) -> ValueError
//   ddp::CommunicationError, TimeoutError, other ddp errors
//                                        -> torch.distributed.DistBackendError
// Anything else passes unchanged.
#pragma once

#include <exception>
#include <functional>

namespace ddp_torch {

std::exception_ptr as_torch_error(std::exception_ptr error);

// Runs `call`; rethrows what it throws as as_torch_error says.
template <typename Call>
auto translating_errors(Call&& call) -> decltype(call()) {
  try {
    return call();
  } catch (...) {
    std::rethrow_exception(as_torch_error(std::current_exception()));
  }
}

// A call the backend does not offer: c10::NotImplementedError (Python's
// NotImplementedError) naming it and what to use instead.
[[noreturn]] void not_supported(const char* call, const char* instead);

}  // namespace ddp_torch
