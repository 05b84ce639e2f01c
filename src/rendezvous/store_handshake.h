// A rank's first contact with a rendezvous store hosted elsewhere (rank 0,
// torchrun's agent). libtorch's TCPStore client cannot tell a store that is
// not up yet from a port held by another program that accepts connections
// and never answers: both look like a wait until the rendezvous timeout
// (minutes). Here the two are told apart: a refused connection is retried
// until the deadline (rank 0 may start later); once a connection is
// accepted, the client is built and makes one request, which a store
// answers at once, and that request has `handshake` to be answered.
#pragma once

#include <ddp/errors.h>
#include <ddp/store.h>

#include <chrono>
#include <functional>
#include <string>

namespace ddp::detail {

// How long a listening store may take to answer its first request (at
// least 1 s of it even when the rendezvous deadline is nearer).
constexpr std::chrono::milliseconds kStoreHandshake{5000};

// Until something accepts a TCP connection at host:port (closed at once).
// TimeoutError at `deadline`, in `context` (who is asking), naming `where`
// (the store, e.g. "the rendezvous store at host:port") and what to check.
void wait_until_listening(const std::string& host, int port, const ErrorContext& context,
                          const std::string& where, std::chrono::steady_clock::time_point deadline);

// Builds the client with `connect` (by value: it may outlive the call on a
// thread left blocked) and makes one request; CommunicationError in
// `context` naming `where` when no answer comes within `handshake`.
StorePtr handshake(std::function<StorePtr()> connect, const ErrorContext& context,
                   const std::string& where, std::chrono::milliseconds handshake = kStoreHandshake);

}  // namespace ddp::detail
