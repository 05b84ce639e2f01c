// A c10d store keeps values as bytes; ddp's are text. The two conversions,
// in one place (c10d's set() taking a std::string exists in 2.x only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddp::detail {

inline std::vector<uint8_t> store_bytes(const std::string& text) {
  return {text.begin(), text.end()};
}
inline std::string store_text(const std::vector<uint8_t>& bytes) {
  return {bytes.begin(), bytes.end()};
}

}  // namespace ddp::detail
