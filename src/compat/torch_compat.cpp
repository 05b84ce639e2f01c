#include "compat/torch_compat.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

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

}  // namespace

void use_classic_tcp_store(c10d::TCPStoreOptions& options) { disable_libuv(options); }

}  // namespace ddp::compat
