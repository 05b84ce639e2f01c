#include "rendezvous/store_listener.h"

#include "compat/torch_compat.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ddp::detail {
namespace {

// Whether `host` resolves to IPv4 addresses and to no IPv6 one (a client
// given an IPv6 address would find nothing listening there).
bool names_ipv4_only(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  bool v4 = false, v6 = false;
  for (const addrinfo* a = found; a; a = a->ai_next) {
    v4 = v4 || a->ai_family == AF_INET;
    v6 = v6 || a->ai_family == AF_INET6;
  }
  freeaddrinfo(found);
  return v4 && !v6;
}

}  // namespace

void listen_on_ipv4(c10d::TCPStoreOptions& options, const std::string& host) {
  if (!names_ipv4_only(host)) return;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    throw std::runtime_error(std::string("cannot open a socket: ") + std::strerror(errno));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // as libtorch's own listener
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(options.port);
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(fd, SOMAXCONN) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int err = errno;
    close(fd);
    throw std::runtime_error("cannot listen on port " + std::to_string(options.port) + ": " +
                             std::strerror(err));
  }
  if (!compat::adopt_listening_socket(options, fd)) {
    close(fd);  // libtorch 1.13 listens on its own
    return;
  }
  options.port = ntohs(address.sin_port);
}

}  // namespace ddp::detail
