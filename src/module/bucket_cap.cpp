#include <ddp/bucket_cap.h>

#include <ddp/errors.h>

#include "base/env.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace ddp {
namespace {

constexpr const char* kEnvironment = "DDP_BUCKET_CAP_MB";

// "auto" (true), or a decimal number written out in full (into `mib`);
// `what` names the source in the error.
bool parse(const std::string& text, const std::string& what, double& mib) {
  if (text == "auto") return true;
  const bool plain =
      !text.empty() && text.find_first_not_of("0123456789.eE+-") == std::string::npos;
  char* end = nullptr;
  const double value = plain ? std::strtod(text.c_str(), &end) : NAN;
  if (!std::isfinite(value) || end != text.c_str() + text.size()) {
    throw InvalidArgument(what + " is '" + text +
                          "': give a bucket size in MiB (e.g. 25) or \"auto\"");
  }
  if (value < 0) throw InvalidArgument(what + " is " + text + ": must be >= 0");
  mib = value;
  return false;
}

}  // namespace

BucketCapMb::BucketCapMb(const std::string& text) : kind_(Kind::kFixed) {
  if (parse(text, "bucket_cap_mb", mib_)) kind_ = Kind::kAuto;
}

BucketCapMb::BucketCapMb(const char* text) : BucketCapMb(std::string(text ? text : "")) {}

BucketCapMb BucketCapMb::resolved() const {
  if (!is_default()) return *this;
  BucketCapMb out(kDefaultMib);
  if (auto text = detail::env_string(kEnvironment)) {
    if (parse(*text, std::string("$") + kEnvironment, out.mib_)) {
      out.kind_ = Kind::kAuto;
      out.mib_ = kDefaultMib;
    }
  }
  return out;
}

std::string BucketCapMb::to_string() const {
  if (is_auto()) return "auto";
  std::ostringstream out;
  out << mib_;
  return out.str();
}

}  // namespace ddp
