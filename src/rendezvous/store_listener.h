// The socket a TCPStore that ddp hosts listens on (rank 0's rendezvous
// store, ddp-store). libtorch's server listens on IPv6 and IPv4 at once, so
// a client that comes over IPv4 shows as ::ffff:a.b.c.d; and its one thread
// names every connection it accepts with getnameinfo, which looks that form
// up in DNS (/etc/hosts holds 127.0.0.1, not ::ffff:127.0.0.1). Where DNS
// is slow or drops the query, the whole store stops for the resolver's
// timeout (5 s) at a connection, and every client with it. On a socket of
// its own that listens on IPv4 only, clients show as plain IPv4 addresses:
// on one host, /etc/hosts names them at once.
#pragma once

#include <string>

namespace c10d {
struct TCPStoreOptions;
}

namespace ddp::detail {

// Makes the server of `options` (isServer) take over an IPv4 socket bound
// to every interface at options.port (0: a free port, written back), when
// `host` (the address its clients are given) names IPv4 addresses only.
// Otherwise, and on libtorch 1.13 (no TCPStoreOptions::masterListenFd),
// libtorch listens as it always does. std::runtime_error naming the port
// and the system's reason when it cannot be bound ("Address already in
// use").
void listen_on_ipv4(c10d::TCPStoreOptions& options, const std::string& host);

}  // namespace ddp::detail
