// The socket a hosted TCPStore listens on (src/rendezvous/store_listener.h):
// IPv4 only for an IPv4 host, so that libtorch's server never asks DNS to
// name a client; the free port written back; a port in use named.
#include "compat/torch_compat.h"
#include "rendezvous/store_listener.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ddp::detail {
namespace {

c10d::TCPStoreOptions server_options(uint16_t port) {
  c10d::TCPStoreOptions opts;
  opts.port = port;
  opts.isServer = true;
  opts.waitWorkers = false;
  opts.timeout = std::chrono::seconds(10);
  compat::use_classic_tcp_store(opts);
  return opts;
}

// Whether a TCP connection to `address` (family AF_INET or AF_INET6) at
// `port` is accepted.
bool accepts(int family, const char* address, uint16_t port) {
  const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_storage to{};
  socklen_t length = 0;
  if (family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&to);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    inet_pton(AF_INET, address, &a->sin_addr);
    length = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&to);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    inet_pton(AF_INET6, address, &a->sin6_addr);
    length = sizeof(*a);
  }
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&to), length) == 0;
  close(fd);
  return ok;
}

TEST(StoreListener, AnIpv4HostsStoreListensOnIpv4OnlyAtTheFreePortItWritesBack) {
  auto opts = server_options(0);
  listen_on_ipv4(opts, "127.0.0.1");
  if (opts.port == 0) GTEST_SKIP() << "this libtorch has no TCPStoreOptions::masterListenFd";
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
  EXPECT_EQ(store->getPort(), opts.port);
  EXPECT_TRUE(accepts(AF_INET, "127.0.0.1", opts.port));
  // libtorch's own listener takes IPv6 too (where the host has it): this
  // one does not, so every client is a plain IPv4 address.
  EXPECT_FALSE(accepts(AF_INET6, "::1", opts.port));

  auto client_opts = opts;
  client_opts.isServer = false;
  c10d::TCPStore client("127.0.0.1", client_opts);
  client.set("k", {1, 2, 3});
  EXPECT_EQ(store->get("k"), (std::vector<uint8_t>{1, 2, 3}));
}

TEST(StoreListener, APortInUseIsNamedWithTheSystemsReason) {
  const int holder = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(holder, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof(a);
  ASSERT_EQ(bind(holder, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(holder, 1), 0);
  ASSERT_EQ(getsockname(holder, reinterpret_cast<sockaddr*>(&a), &length), 0);
  const uint16_t port = ntohs(a.sin_port);

  auto opts = server_options(port);
  try {
    listen_on_ipv4(opts, "127.0.0.1");
    ADD_FAILURE() << "port " << port << " was taken, yet listen_on_ipv4 returned";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("port " + std::to_string(port)), std::string::npos) << what;
    EXPECT_NE(what.find("in use"), std::string::npos) << what;
  }
  close(holder);
}

TEST(StoreListener, AnIpv6HostIsLeftToLibtorch) {
  auto opts = server_options(0);
  listen_on_ipv4(opts, "::1");
  EXPECT_EQ(opts.port, 0);  // nothing taken over: libtorch listens as it does
}

}  // namespace
}  // namespace ddp::detail
