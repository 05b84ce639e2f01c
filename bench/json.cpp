#include "json.h"

#include "timeline/chrome_trace.h"  // one JSON string escaper for the library and bench

#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace ddp_bench {

Json::Json(bool b) : kind_(Kind::Scalar), text_(b ? "true" : "false") {}
Json::Json(int64_t v) : kind_(Kind::Scalar), text_(std::to_string(v)) {}
Json::Json(double v) : kind_(Kind::Scalar) {
  if (!std::isfinite(v)) {
    text_ = "null";
    return;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  text_ = buf;
}
Json::Json(std::string s) : kind_(Kind::String), text_(std::move(s)) {}

Json Json::raw(std::string json_text) {
  Json j;
  j.kind_ = Kind::Scalar;
  j.text_ = std::move(json_text);
  return j;
}

Json Json::object() {
  Json j;
  j.kind_ = Kind::Object;
  return j;
}

Json Json::array() {
  Json j;
  j.kind_ = Kind::Array;
  return j;
}

Json& Json::set(const std::string& key, Json value) {
  if (kind_ != Kind::Object) throw std::logic_error("Json::set on a non-object");
  for (auto& m : members_) {
    if (m.first == key) {
      m.second = std::move(value);
      return *this;
    }
  }
  members_.emplace_back(key, std::move(value));
  return *this;
}

Json& Json::push(Json value) {
  if (kind_ != Kind::Array) throw std::logic_error("Json::push on a non-array");
  items_.push_back(std::move(value));
  return *this;
}

void Json::write(std::string& out, int indent, int depth) const {
  auto newline = [&](int d) {
    if (indent <= 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  // `count` entries between `open` and `close`, one a line: entry(i) writes the i-th.
  auto list = [&](char open, size_t count, char close, auto entry) {
    out += open;
    for (size_t i = 0; i < count; ++i) {
      if (i) out += ',';
      newline(depth + 1);
      entry(i);
    }
    if (count) newline(depth);
    out += close;
  };
  switch (kind_) {
    case Kind::Null:
      out += "null";
      break;
    case Kind::Scalar:
      out += text_;
      break;
    case Kind::String:
      ddp::append_json_string(out, text_);
      break;
    case Kind::Object:
      list('{', members_.size(), '}', [&](size_t i) {
        ddp::append_json_string(out, members_[i].first);
        out += indent > 0 ? ": " : ":";
        members_[i].second.write(out, indent, depth + 1);
      });
      break;
    case Kind::Array:
      // Arrays of scalars or small objects (result rows) go one per line.
      list('[', items_.size(), ']', [&](size_t i) {
        items_[i].write(out, items_[i].kind_ == Kind::Object ? 0 : indent, depth + 1);
      });
      break;
  }
}

std::string Json::dump(int indent) const {
  std::string out;
  write(out, indent, 0);
  out += '\n';
  return out;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) throw std::runtime_error("cannot write '" + path + "'");
}

void write_result(const std::string& program, const std::string& path, const Json& result,
                  int indent) {
  write_file(path, result.dump(indent));
  std::fprintf(stderr, "%s: wrote %s\n", program.c_str(), path.c_str());
}

}  // namespace ddp_bench
