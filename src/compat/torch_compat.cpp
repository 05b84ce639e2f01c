#include "compat/torch_compat.h"

#include <ATen/ops/_foreach_zero.h>
#if __has_include(<ATen/ops/_foreach_copy.h>)
#include <ATen/ops/_foreach_copy.h>
#define DDP_HAS_FOREACH_COPY 1
#endif
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/optim/optimizer.h>

#include <type_traits>
#include <utility>

namespace ddp::compat {
namespace {

// Whether T has a member `useLibUV` (libtorch >= 2.2): detected rather than
// read from TORCH_VERSION, so that a build that backports or removes the
// field still compiles.
template <typename T, typename = void>
struct HasUseLibUV : std::false_type {};
template <typename T>
struct HasUseLibUV<T, std::void_t<decltype(std::declval<T&>().useLibUV)>> : std::true_type {};

template <typename T>
void disable_libuv(T& options) {
  if constexpr (HasUseLibUV<T>::value) options.useLibUV = false;
}

// Whether T has a member `masterListenFd` (libtorch >= 2.1). Detected.
template <typename T, typename = void>
struct HasMasterListenFd : std::false_type {};
template <typename T>
struct HasMasterListenFd<T, std::void_t<decltype(std::declval<T&>().masterListenFd)>>
    : std::true_type {};

template <typename T>
bool set_listen_fd(T& options, int fd) {
  if constexpr (HasMasterListenFd<T>::value) {
    options.masterListenFd = fd;
    return true;
  } else {
    return false;
  }
}

// Whether Optimizer::zero_grad takes set_to_none (2.x, default true): then
// it undefines gradients; 1.13's takes nothing and zeroes them. Detected.
template <typename O, typename = void>
struct ZeroGradSetsToNone : std::false_type {};
template <typename O>
struct ZeroGradSetsToNone<O, std::void_t<decltype(std::declval<O&>().zero_grad(true))>>
    : std::true_type {};

// Whether S has listKeys() (libtorch 2.x's Store).
template <typename S, typename = void>
struct HasListKeys : std::false_type {};
template <typename S>
struct HasListKeys<S, std::void_t<decltype(std::declval<S&>().listKeys())>> : std::true_type {};

template <typename S>
std::optional<std::vector<std::string>> keys_of(S& store) {
  if constexpr (HasListKeys<S>::value) {
    return store.listKeys();
  } else {
    return std::nullopt;
  }
}

}  // namespace

void use_classic_tcp_store(c10d::TCPStoreOptions& options) { disable_libuv(options); }

bool adopt_listening_socket(c10d::TCPStoreOptions& options, int fd) {
  return set_listen_fd(options, fd);
}

std::optional<std::vector<std::string>> list_keys(c10d::Store& store) { return keys_of(store); }

void copy_all(at::TensorList dst, at::TensorList src) {
#ifdef DDP_HAS_FOREACH_COPY
  at::_foreach_copy_(dst, src);
#else
  for (size_t k = 0; k < dst.size(); ++k) dst[k].copy_(src[k]);
#endif
}

void zero_all(at::TensorList tensors) { at::_foreach_zero_(tensors); }

void clear_as_zero_grad_does(at::Tensor& grad) {
  if constexpr (ZeroGradSetsToNone<torch::optim::Optimizer>::value) {
    grad = at::Tensor();
  } else if (grad.defined()) {
    grad.detach_();
    grad.zero_();
  }
}

std::shared_ptr<torch::autograd::Node> grad_accumulator(const at::Tensor& leaf) {
  // autograd's handle (a shared_ptr or an intrusive_ptr), held by the
  // returned pointer's deleter and dropped with its last copy.
  auto handle = torch::autograd::impl::grad_accumulator(leaf);
  auto* node = handle.get();
  return std::shared_ptr<torch::autograd::Node>(node, [handle](torch::autograd::Node*) {});
}

}  // namespace ddp::compat
