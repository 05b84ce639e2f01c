#include "base/env.h"

#include <ddp/errors.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace ddp::detail {

std::optional<std::string> env_string(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<long> env_int(const char* name, long min, long max) {
  auto text = env_string(name);
  if (!text) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long value = std::strtol(text->c_str(), &end, 10);
  if (errno != 0 || end == text->c_str() || *end != '\0' || value < min || value > max) {
    throw InvalidArgument("environment variable " + std::string(name) + "='" + *text +
                          "' is not an integer in [" + std::to_string(min) + ", " +
                          std::to_string(max) + "]");
  }
  return value;
}

DebugLevel debug_level_from_env() {
  auto text = env_string("DDP_DEBUG");
  if (!text) return DebugLevel::OFF;
  std::string v = *text;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "off") return DebugLevel::OFF;
  if (v == "info") return DebugLevel::INFO;
  if (v == "detail") return DebugLevel::DETAIL;
  throw InvalidArgument("environment variable DDP_DEBUG='" + *text +
                        "' is not one of off, info, detail");
}

}  // namespace ddp::detail
