// DistributedDataParallelOptions::bucket_cap_mb: a bucket size in MiB, or
// "auto" (bucket autotuning: docs/ddp.md, "Bucket autotuning").
//
//   options.bucket_cap_mb(50);       // 50 MiB
//   options.bucket_cap_mb("auto");   // tried in the first iterations
//   DDP_BUCKET_CAP_MB=auto ./train   // the same, for a program left at the default
#pragma once

#include <string>
#include <type_traits>

namespace ddp {

class BucketCapMb {
  template <typename T>
  struct IsSize
      : std::bool_constant<std::is_arithmetic_v<T> && !std::is_same_v<T, bool> &&
                           !std::is_same_v<T, char> && !std::is_same_v<T, signed char> &&
                           !std::is_same_v<T, unsigned char> && !std::is_same_v<T, wchar_t> &&
                           !std::is_same_v<T, char16_t> && !std::is_same_v<T, char32_t>> {};

 public:
  // The default: $DDP_BUCKET_CAP_MB when set (a number of MiB or "auto"),
  // else 25 MiB (resolved when DistributedDataParallel is constructed).
  BucketCapMb() = default;
  // A fixed size in MiB (>= 0; checked where it is used): any number, but
  // not a bool or a character.
  template <typename Number, typename = std::enable_if_t<IsSize<Number>::value>>
  BucketCapMb(Number mib) : kind_(Kind::kFixed), mib_(static_cast<double>(mib)) {}  // NOLINT
  // "auto", or a number of MiB written out ("50", "0.5"); anything else is
  // an InvalidArgument naming the text.
  BucketCapMb(const char* text);         // NOLINT(google-explicit-constructor)
  BucketCapMb(const std::string& text);  // NOLINT(google-explicit-constructor)

  static BucketCapMb autotune() { return BucketCapMb("auto"); }
  // The default resolved: from $DDP_BUCKET_CAP_MB (InvalidArgument naming
  // the variable if it is neither a number nor "auto"), else 25. A value
  // that is not the default is returned as it is.
  BucketCapMb resolved() const;

  bool is_default() const { return kind_ == Kind::kDefault; }
  bool is_auto() const { return kind_ == Kind::kAuto; }
  // The size in MiB. For "auto": 25, the size tuning starts from and
  // prefers. For the default: 25 until resolved().
  double mib() const { return mib_; }
  // "auto", or the size, e.g. "25".
  std::string to_string() const;

 private:
  enum class Kind { kDefault, kFixed, kAuto };
  static constexpr double kDefaultMib = 25;
  Kind kind_ = Kind::kDefault;
  double mib_ = kDefaultMib;
};

}  // namespace ddp
