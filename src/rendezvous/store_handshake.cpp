#include "rendezvous/store_handshake.h"

#include "base/bounded.h"

#include <ddp/errors.h>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ddp::detail {
namespace {

using Clock = std::chrono::steady_clock;

// One connection attempt to `address`, at most until `deadline`: 0 when it
// was accepted, else the errno that refused it (ETIMEDOUT at the deadline).
int try_connect(const addrinfo& address, Clock::time_point deadline) {
  const int fd = socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        address.ai_protocol);
  if (fd < 0) return errno;
  int err = 0;
  if (connect(fd, address.ai_addr, address.ai_addrlen) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{fd, POLLOUT, 0};
      const int ready = poll(&p, 1, static_cast<int>(std::clamp<long long>(left, 0, 1000)));
      socklen_t len = sizeof(err);
      if (ready == 1) {
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      } else {
        err = ETIMEDOUT;
      }
    }
  }
  // A port in the ephemeral range with nothing listening can connect to
  // itself (TCP's simultaneous open): that is no listener.
  if (err == 0) {
    sockaddr_storage mine{}, theirs{};
    socklen_t mine_len = sizeof(mine), theirs_len = sizeof(theirs);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &mine_len) == 0 &&
        getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &theirs_len) == 0 &&
        mine_len == theirs_len && std::memcmp(&mine, &theirs, mine_len) == 0) {
      err = ECONNREFUSED;
    }
  }
  close(fd);
  return err;
}

}  // namespace

void wait_until_listening(const std::string& host, int port, const ErrorContext& context,
                          const std::string& where, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  std::string last = "no address";
  while (Clock::now() < deadline) {
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) == 0) {
      for (addrinfo* a = found; a; a = a->ai_next) {
        const int err = try_connect(*a, deadline);
        if (err == 0) {
          freeaddrinfo(found);
          return;
        }
        last = std::strerror(err);
      }
      freeaddrinfo(found);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string what = ": nothing accepted a connection there within the rendezvous timeout";
  const std::string check =
      ". Check MASTER_ADDR/MASTER_PORT and that rank 0 (or the launcher that hosts the store) "
      "runs.";
  throw TimeoutError(context, where + what + " (last: " + last + ")" + check);
}

StorePtr handshake(std::function<StorePtr()> connect, const ErrorContext& context,
                   const std::string& where, std::chrono::milliseconds handshake) {
  auto first_request = [connect = std::move(connect)]() -> StorePtr {
    StorePtr store = connect();
    store->check({"ddp/handshake"});  // any answer will do
    return store;
  };
  return run_bounded<StorePtr>(first_request, handshake, [&] {
    const std::string why = " accepted the connection but did not answer the store's handshake";
    const std::string check =
        ": another program holds that port (choose another MASTER_PORT), or the store's host "
        "(rank 0) is stopped or cut off.";
    throw CommunicationError(
        context, where + why + " within " + std::to_string(handshake.count()) + " ms" + check);
  });
}

}  // namespace ddp::detail
