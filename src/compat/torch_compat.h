// The one place where ddp's code differs between libtorch versions: Debian
// 12's 1.13 and 2.x (Debian 13's 2.6, pytorch.org's and pip's builds). Every
// version switch of the library lives in torch_compat.cpp, behind these
// functions; the rest of the code is the same on every version. The list of
// differences and how each is handled is in docs/architecture.md
// ("libtorch versions").
#pragma once

namespace c10d {
struct TCPStoreOptions;
}

namespace ddp::compat {

// TCPStore with its classic socket server on every version. 2.x added
// TCPStoreOptions::useLibUV and turned it on by default, but builds without
// libuv (Debian's) then refuse to start the store; the classic server is in
// every version and is what 1.13 uses.
void use_classic_tcp_store(c10d::TCPStoreOptions& options);

}  // namespace ddp::compat
