#include "errors.h"

#include <ddp/errors.h>

#include <c10/util/Exception.h>

#include <string>

namespace ddp_torch {
namespace {

template <typename TorchError>
std::exception_ptr exception_of(const std::string& message) {
  try {
    throw TorchError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message);
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace

std::exception_ptr as_torch_error(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const ddp::InvalidArgument& e) {
    return exception_of<c10::ValueError>(e.what());
  } catch (const ddp::Error& e) {
    return exception_of<c10::DistBackendError>(e.what());
  } catch (...) {
    return error;
  }
}

void not_supported(const char* call, const char* instead) {
  std::rethrow_exception(exception_of<c10::NotImplementedError>(
      std::string("ddp: the torch.distributed backend \"ddp\" does not support ") + call +
      "; " + instead));
}

}  // namespace ddp_torch
