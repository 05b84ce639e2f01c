#include "collectives/gloo/network.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
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

namespace {

// "0100007F:1F90" (little-endian IPv4, port, in hex) -> "[127.0.0.1]:8080";
// also IPv4-mapped IPv6 ("0000000000000000FFFF00000100007F:1F90").
std::string proc_address(const std::string& hex) {
  auto colon = hex.find(':');
  if (colon != 8 && !(colon == 32 && hex.compare(0, 24, "0000000000000000FFFF0000") == 0)) {
    return "";
  }
  uint32_t ip = static_cast<uint32_t>(std::stoul(hex.substr(colon - 8, 8), nullptr, 16));
  unsigned port = static_cast<unsigned>(std::stoul(hex.substr(colon + 1), nullptr, 16));
  return "[" + std::to_string(ip & 0xff) + "." + std::to_string((ip >> 8) & 0xff) + "." +
         std::to_string((ip >> 16) & 0xff) + "." + std::to_string(ip >> 24) +
         "]:" + std::to_string(port);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> established_tcp_connections() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream table(path);
    std::string line;
    std::getline(table, line);  // header
    while (std::getline(table, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      if (!(fields >> slot >> local >> remote >> state) || state != "01") continue;  // ESTABLISHED
      try {
        std::string l = proc_address(local), r = proc_address(remote);
        if (!l.empty() && !r.empty()) out.emplace_back(l, r);
      } catch (const std::exception&) {
        // a line we cannot parse: skip it
      }
    }
  }
  return out;
}

std::string default_bind_host(const std::string& master_host) {
  if (!master_host.empty()) {
    std::string local = local_address_towards(master_host);
    if (!local.empty()) return local;
  }
  return bindable_hostname();
}

}  // namespace ddp::detail
