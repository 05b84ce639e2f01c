// Which local address a backend binds to.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ddp::detail {

// The value of $DDP_SOCKET_IFNAME, else $GLOO_SOCKET_IFNAME, else "".
std::string socket_interface_from_env();

// The local address whose route reaches `host` (no packet is sent); "" when
// `host` does not resolve or is unreachable.
std::string local_address_towards(const std::string& host);

// This machine's host name when it resolves to an address that can be bound
// here, else "127.0.0.1".
std::string bindable_hostname();

// Where a backend binds when neither an interface nor a host name is given:
// the local address whose route reaches `master_host` (the rendezvous
// master), else bindable_hostname(). "" for `master_host` skips the route.
std::string default_bind_host(const std::string& master_host);

// This network namespace's established IPv4 TCP connections (IPv4-mapped
// IPv6 ones included), as ("[local ip]:port", "[remote ip]:port") pairs,
// from /proc/net/tcp and tcp6 (empty where they cannot be read).
std::vector<std::pair<std::string, std::string>> established_tcp_connections();

}  // namespace ddp::detail
