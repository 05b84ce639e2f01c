// The one place where ddp's code differs between libtorch versions: Debian
// 12's 1.13 and 2.x (Debian 13's 2.6, pytorch.org's and pip's builds). Every
// version switch of the library lives in torch_compat.cpp, behind these
// functions; the rest of the code is the same on every version.
//
// The differences found, and where each is handled:
// - TCPStoreOptions::useLibUV (2.x) defaults to true; builds without libuv
//   (Debian's) then refuse to start the store: use_classic_tcp_store() below.
//   PyTorch's Python side likewise: USE_LIBUV=0 in tests/reference; torchrun
//   --standalone (c10d rendezvous ignores USE_LIBUV) cannot start its store on
//   Debian 13's PyTorch, so rendezvous_test skips its torchrun case there.
// - c10d::Store::set gained an overload taking std::string (2.x), so
//   set(key, {1}) is ambiguous: callers pass std::vector<uint8_t> (one code
//   for both versions, no switch).
// - Optimizer::zero_grad() undefines gradients in 2.x (1.13 zeroes them):
//   the Reducer takes an undefined gradient as "not yet produced" and, with
//   gradient_as_bucket_view, points it at its bucket view again after
//   backward; the reference tests zero explicitly on both sides. A rank that
//   joined clears the gradients no training rank produced as the others'
//   zero_grad() did: clear_as_zero_grad_does() below.
// - Autograd hooks (FunctionPreHook, LambdaPostHook, add_post_hook): the
//   same signatures through 2.6 (2.x adds compiled_args, defaulted).
// - Checkpoints (src/checkpoint/): Generator::get_state/set_state (and its
//   mutex), Optimizer::save/load, OutputArchive::save_to(writer),
//   InputArchive::load_from(data, size) and the Sampler<> interface are the
//   same in 1.13 and 2.6 (2.x's c10::optional is std::optional; ddp spells
//   it c10::optional): no switch.
// - The CMake package: ${TORCH_LIBRARIES} holds absolute paths; libddp links
//   the imported target `torch` (CMakeLists.txt).
// - pytorch.org's and pip's libtorch bundle and export Gloo: the Gloo module
//   (src/collectives/gloo/module.cpp); with the pre-C++11 string ABI the
//   module is not built (cmake/gloo_module.cmake).
// - Autograd's nodes are held by std::shared_ptr up to 2.14 and by
//   c10::intrusive_ptr from 2.15 on: grad_accumulator() below; code that
//   only follows them uses raw pointers (.get() works on both).
// - libtorch 2.13 and later need C++20: their CMake package asks for it
//   (cxx_std_20 on the torch target); ddp's code compiles as either.
// - at::_foreach_copy_ (2.1 on; batched_grad_copy): copy_all() below, a
//   loop of copy_ where the header is missing (1.13), detected.
// - Optimizer::state() is keyed by the parameter's TensorImpl address
//   printed as a string (1.13) or by the address itself, void* (2.x):
//   optimizer_state_key() below, a template switching on the map's key type
//   (so it lives in this header, not in torch_compat.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace c10d {
class Store;
struct TCPStoreOptions;
}
namespace torch::autograd {
struct Node;
}

namespace ddp::compat {

// What Optimizer::zero_grad() does by default to one gradient: undefines it
// (2.x: set_to_none), or zeroes it in place (1.13). A rank that joined uses
// it for the parameters no training rank used, which the others' zero_grad
// cleared (docs/ddp.md, "Uneven inputs: Join").
void clear_as_zero_grad_does(at::Tensor& grad);

// dst[k].copy_(src[k]) for every k, in one batched call where libtorch has
// one (at::_foreach_copy_; on CUDA one kernel launch for tensors of a dtype).
void copy_all(at::TensorList dst, at::TensorList src);
// Every tensor zeroed, in one batched call (at::_foreach_zero_).
void zero_all(at::TensorList tensors);

// TCPStore with its classic socket server on every version. 2.x added
// TCPStoreOptions::useLibUV and turned it on by default, but builds without
// libuv (Debian's) then refuse to start the store; the classic server is in
// every version and is what 1.13 uses.
void use_classic_tcp_store(c10d::TCPStoreOptions& options);

// Has a TCPStore server take over `fd`, a socket bound to options.port
// (TCPStoreOptions::masterListenFd, libtorch >= 2.1). False where the
// field is missing (1.13): `fd` stays the caller's.
bool adopt_listening_socket(c10d::TCPStoreOptions& options, int fd);

// Every key on `store`, where its class can list them (libtorch 2.x's
// Store::listKeys; detected); nullopt where it cannot (1.13).
std::optional<std::vector<std::string>> list_keys(c10d::Store& store);

// The gradient accumulator of a leaf that requires grad (autograd's node
// for it), kept alive by the returned pointer as by autograd's own handle:
// impl::grad_accumulator returns a std::shared_ptr<Node> up to 2.14 and a
// c10::intrusive_ptr<Node> from 2.15 on (autograd's nodes became intrusive).
std::shared_ptr<torch::autograd::Node> grad_accumulator(const at::Tensor& leaf);

// The key of `param`'s entry in an optimizer's state() map.
template <typename StateMap>
typename StateMap::key_type optimizer_state_key(const StateMap&, const at::Tensor& param) {
  using Key = typename StateMap::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    // What 1.13's c10::guts::to_string(TensorImpl*) writes (2.x has no such function).
    std::ostringstream key;
    key << param.unsafeGetTensorImpl();
    return key.str();
  } else {
    return static_cast<Key>(param.unsafeGetTensorImpl());
  }
}

}  // namespace ddp::compat
