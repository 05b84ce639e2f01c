#pragma once

#include <optional>
#include <string>

namespace ddprun {

// Asks the kernel for a TCP port that is free on `host` right now: binds a
// socket to port 0 there, reads the port back, closes the socket. On failure
// returns nullopt and sets `error` to a one-line reason.
std::optional<int> find_free_port(const std::string& host, std::string& error);

}  // namespace ddprun
