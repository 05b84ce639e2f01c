// Picks a free TCP port for the rendezvous when --master-port is not given.
//
// Resolves the master address (numeric or host name, IPv4 or IPv6), binds a
// TCP socket to port 0 on the first address that accepts it, reads the port
// the kernel chose with getsockname(), and closes the socket. The port is
// only free at that moment; rank 0 binds it a few milliseconds later, which
// is the same (small) race torchrun accepts.
#include "free_port.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ddprun {
namespace {

// Port of a bound socket, or 0.
int bound_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  }
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  }
  return 0;
}

}  // namespace

std::optional<int> find_free_port(const std::string& host, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), "0", &hints, &found);
  if (rc != 0) {
    error = std::string("cannot resolve '") + host + "': " + gai_strerror(rc);
    return std::nullopt;
  }
  error = "no address of '" + host + "' could be bound";
  std::optional<int> port;
  for (const addrinfo* ai = found; ai != nullptr && !port; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      error = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      const int p = bound_port(fd);
      if (p > 0) port = p;
    } else {
      error = "bind to '" + host + "': " + std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(found);
  return port;
}

}  // namespace ddprun
