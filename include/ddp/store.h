// The key-value store used for rendezvous: libtorch's c10d::Store (TCPStore,
// FileStore, HashStore, PrefixStore). Forward-declared here so that public
// headers stay light; include <torch/csrc/distributed/c10d/TCPStore.hpp> and
// friends where you construct one.
#pragma once

#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Store;
}

namespace ddp {
using StorePtr = c10::intrusive_ptr<c10d::Store>;
}  // namespace ddp
