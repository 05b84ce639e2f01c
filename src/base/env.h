// Reading the environment with errors that name the variable and the form
// expected.
#pragma once

#include <optional>
#include <string>

namespace ddp::detail {

// Unset or empty: nullopt.
std::optional<std::string> env_string(const char* name);
// Unset or empty: nullopt. Not an integer in [min, max]: InvalidArgument
// naming the variable, its value and the range.
std::optional<long> env_int(const char* name, long min, long max);

enum class DebugLevel { OFF, INFO, DETAIL };
// $DDP_DEBUG: "off" (or unset), "info", "detail"; anything else is an error.
DebugLevel debug_level_from_env();

}  // namespace ddp::detail
