#include "detail/network.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>

namespace ddp::detail {
namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* p) const { freeaddrinfo(p); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

AddrInfoPtr resolve(const std::string& host, int socktype) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), "0", &hints, &result) != 0) return nullptr;
  return AddrInfoPtr(result);
}

std::string numeric_host(const sockaddr* addr, socklen_t len) {
  char buf[NI_MAXHOST];
  if (getnameinfo(addr, len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return buf;
}

}  // namespace

std::string socket_interface_from_env() {
  for (const char* name : {"DDP_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return value;
  }
  return "";
}

std::string local_address_towards(const std::string& host) {
  auto info = resolve(host, SOCK_DGRAM);
  for (addrinfo* p = info.get(); p != nullptr; p = p->ai_next) {
    int fd = socket(p->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    // A UDP connect only picks the route; nothing goes on the wire.
    reinterpret_cast<sockaddr_in*>(p->ai_addr)->sin_port = htons(9);
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    bool ok = connect(fd, p->ai_addr, p->ai_addrlen) == 0 &&
              getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
    close(fd);
    if (ok) return numeric_host(reinterpret_cast<sockaddr*>(&local), len);
  }
  return "";
}

std::string bindable_hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0) {
    auto info = resolve(name, SOCK_STREAM);
    for (addrinfo* p = info.get(); p != nullptr; p = p->ai_next) {
      int fd = socket(p->ai_family, SOCK_STREAM, 0);
      if (fd < 0) continue;
      bool ok = bind(fd, p->ai_addr, p->ai_addrlen) == 0;
      close(fd);
      if (ok) return name;
    }
  }
  return "127.0.0.1";
}

}  // namespace ddp::detail
