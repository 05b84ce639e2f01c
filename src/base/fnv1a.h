// FNV-1a (64-bit), for fingerprints that ranks compare: the same on every
// rank and build, as std::hash need not be.
#pragma once

#include <cstdint>
#include <string_view>

namespace ddp::detail {

class Fnv1a {
 public:
  Fnv1a& add(std::string_view bytes) {
    for (unsigned char c : bytes) add_byte(c);
    return *this;
  }
  // The integer's eight bytes, least significant first.
  Fnv1a& add(int64_t value) {
    for (int b = 0; b < 8; ++b) add_byte((static_cast<uint64_t>(value) >> (8 * b)) & 0xff);
    return *this;
  }
  uint64_t value() const { return hash_; }

 private:
  void add_byte(uint64_t byte) { hash_ = (hash_ ^ byte) * 0x100000001b3ull; }
  uint64_t hash_ = 0xcbf29ce484222325ull;
};

}  // namespace ddp::detail
