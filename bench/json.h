// The JSON that ddp_bench writes its results in: a value type just big
// enough for result files (objects keep insertion order, so a file reads in
// the order it was built), and writing a file. No libtorch here.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ddp_bench {

// A JSON value: enough to write results (objects keep insertion order).
class Json {
 public:
  Json() : kind_(Kind::Null) {}
  Json(bool b);
  Json(int v) : Json(static_cast<int64_t>(v)) {}
  Json(int64_t v);
  Json(size_t v) : Json(static_cast<int64_t>(v)) {}
  Json(double v);
  Json(const char* s) : Json(std::string(s)) {}
  Json(std::string s);
  static Json object();
  static Json array();
  // `json_text` as it is (already JSON, e.g. a trace's events).
  static Json raw(std::string json_text);

  Json& set(const std::string& key, Json value);  // objects
  Json& push(Json value);                         // arrays
  std::string dump(int indent = 2) const;

 private:
  enum class Kind { Null, Scalar, String, Object, Array };
  void write(std::string& out, int indent, int depth) const;

  Kind kind_;
  std::string text_;  // Scalar: its JSON text; String: the raw string
  std::vector<std::pair<std::string, Json>> members_;
  std::vector<Json> items_;
};

// Writes `text` to `path` (throws with the path on failure).
void write_file(const std::string& path, const std::string& text);
// Writes a subcommand's result file (`result` dumped with `indent`) to `path`
// and says so on stderr: "PROGRAM: wrote PATH".
void write_result(const std::string& program, const std::string& path, const Json& result,
                  int indent = 2);

}  // namespace ddp_bench
