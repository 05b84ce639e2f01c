#include "bench_util.h"

#include <dlfcn.h>
#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

namespace ddp_bench {

// --- arguments --------------------------------------------------------------

Args::Args(std::vector<std::string> args) {
  // Split "--name=value" so that take() sees one form.
  for (auto& a : args) {
    auto eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      args_.push_back(a.substr(0, eq));
      args_.push_back(a.substr(eq + 1));
    } else {
      args_.push_back(std::move(a));
    }
  }
}

std::optional<std::string> Args::take(const std::string& name) {
  auto it = std::find(args_.begin(), args_.end(), name);
  if (it == args_.end()) return std::nullopt;
  if (it + 1 == args_.end()) throw UsageError(name + " needs a value");
  std::string value = *(it + 1);
  args_.erase(it, it + 2);
  return value;
}

std::optional<int64_t> Args::take_int(const std::string& name, int64_t min, int64_t max) {
  auto text = take(name);
  if (!text) return std::nullopt;
  try {
    size_t used = 0;
    long long v = std::stoll(*text, &used);
    if (used == text->size() && v >= min && v <= max) return v;
  } catch (const std::exception&) {
  }
  throw UsageError(name + " expects an integer in [" + std::to_string(min) + ", " +
                   std::to_string(max) + "], got '" + *text + "'");
}

std::optional<double> Args::take_double(const std::string& name, double min) {
  auto text = take(name);
  if (!text) return std::nullopt;
  try {
    size_t used = 0;
    double v = std::stod(*text, &used);
    if (used == text->size() && v >= min) return v;
  } catch (const std::exception&) {
  }
  throw UsageError(name + " expects a number >= " + format_fixed(min, 1) + ", got '" +
                   *text + "'");
}

bool Args::take_flag(const std::string& name) {
  auto it = std::find(args_.begin(), args_.end(), name);
  if (it == args_.end()) return false;
  args_.erase(it);
  return true;
}

void Args::expect_empty() const {
  if (!args_.empty()) throw UsageError("unknown argument '" + args_.front() + "'");
}

// --- sizes ------------------------------------------------------------------

std::optional<int64_t> parse_scaled(const std::string& text, int64_t k) {
  std::string digits = text;
  int64_t unit = 1;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'k': case 'K': unit = k; break;
      case 'm': case 'M': unit = k * k; break;
      case 'g': case 'G': unit = k * k * k; break;
      default: break;
    }
    if (unit != 1) digits.pop_back();
  }
  try {
    size_t used = 0;
    long long v = std::stoll(digits, &used);
    if (used == digits.size() && v > 0 && v <= (int64_t{1} << 40) / unit) return v * unit;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

int64_t parse_bytes(const std::string& text) {
  if (auto bytes = parse_scaled(text, 1024)) return *bytes;
  throw UsageError("'" + text + "' is not a byte size like 4096, 4K, 1M or 1G");
}

std::vector<int64_t> parse_byte_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(parse_bytes(item));
  }
  if (out.empty()) throw UsageError("empty size list '" + text + "'");
  return out;
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"G", "M", "K"};
  const int shifts[] = {30, 20, 10};
  for (int i = 0; i < 3; ++i) {
    int64_t unit = int64_t{1} << shifts[i];
    if (bytes >= unit && bytes % unit == 0) return std::to_string(bytes / unit) + units[i];
  }
  return std::to_string(bytes);
}

std::string format_fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, value);
  return buf;
}

// --- statistics -------------------------------------------------------------

Stats summarize(std::vector<double> samples) {
  Stats s;
  s.count = samples.size();
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  s.median = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  s.min = samples.front();
  s.max = samples.back();
  double sum = 0;
  for (double v : samples) sum += v;
  s.mean = sum / static_cast<double>(n);
  return s;
}

double algbw_gbps(int64_t bytes, double micros) {
  return micros > 0 ? static_cast<double>(bytes) / (micros * 1e-6) / 1e9 : 0.0;
}

double allreduce_busbw_gbps(int64_t bytes, double micros, int world_size) {
  return algbw_gbps(bytes, micros) * 2.0 * (world_size - 1) / world_size;
}

// --- JSON -------------------------------------------------------------------

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

namespace {

void write_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

}  // namespace

void Json::write(std::string& out, int indent, int depth) const {
  auto newline = [&](int d) {
    if (indent <= 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (kind_) {
    case Kind::Null: out += "null"; break;
    case Kind::Scalar: out += text_; break;
    case Kind::String: write_string(out, text_); break;
    case Kind::Object: {
      out += '{';
      for (size_t i = 0; i < members_.size(); ++i) {
        if (i) out += ',';
        newline(depth + 1);
        write_string(out, members_[i].first);
        out += indent > 0 ? ": " : ":";
        members_[i].second.write(out, indent, depth + 1);
      }
      if (!members_.empty()) newline(depth);
      out += '}';
      break;
    }
    case Kind::Array: {
      // Arrays of scalars or small objects (result rows) go one per line.
      out += '[';
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i) out += ',';
        newline(depth + 1);
        items_[i].write(out, items_[i].kind_ == Kind::Object ? 0 : indent, depth + 1);
      }
      if (!items_.empty()) newline(depth);
      out += ']';
      break;
    }
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

// --- tables -----------------------------------------------------------------

std::string markdown_table(const std::vector<std::string>& header,
                           const std::vector<std::vector<std::string>>& rows,
                           const std::vector<bool>& right_aligned) {
  std::vector<size_t> width(header.size(), 3);
  for (size_t c = 0; c < header.size(); ++c) width[c] = std::max(width[c], header[c].size());
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], r[c].size());
    }
  }
  auto right = [&](size_t c) { return c < right_aligned.size() && right_aligned[c]; };
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s = "|";
    for (size_t c = 0; c < width.size(); ++c) {
      std::string cell = c < cells.size() ? cells[c] : "";
      std::string pad(width[c] - std::min(width[c], cell.size()), ' ');
      s += ' ' + (right(c) ? pad + cell : cell + pad) + " |";
    }
    return s + '\n';
  };
  std::string out = line(header);
  out += '|';
  for (size_t c = 0; c < width.size(); ++c) {
    out += right(c) ? ' ' + std::string(width[c] - 1, '-') + ": |"
                    : ' ' + std::string(width[c], '-') + " |";
  }
  out += '\n';
  for (const auto& r : rows) out += line(r);
  return out;
}

// --- the machine ------------------------------------------------------------

namespace {

std::string read_first_match(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) != 0) continue;
    auto colon = line.find_first_of(":=", key.size());
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t\""));
    while (!value.empty() && (value.back() == '"' || value.back() == ' ')) value.pop_back();
    return value;
  }
  return "";
}

int allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string link_description() {
  if (const char* link = std::getenv("DDP_BENCH_LINK"); link && *link) return link;
  const char* master = std::getenv("MASTER_ADDR");
  std::string m = master ? master : "";
  if (m.empty() || m == "127.0.0.1" || m == "localhost" || m == "::1") return "loopback";
  return "network (MASTER_ADDR=" + m + ")";
}

}  // namespace

double link_rate_bits_per_s() {
  const char* v = std::getenv("DDP_BENCH_LINK_RATE_BPS");
  if (!v || !*v) return 0.0;
  char* end = nullptr;
  double rate = std::strtod(v, &end);
  return end && *end == '\0' && rate > 0 ? rate : 0.0;
}

Json describe_machine(const std::string& torch_version) {
  Json m = Json::object();
  std::string cpu = read_first_match("/proc/cpuinfo", "model name");
  m.set("cpu_model", cpu.empty() ? "unknown" : cpu);
  m.set("logical_cpus", static_cast<int64_t>(std::thread::hardware_concurrency()));
  m.set("cpus_allowed", allowed_cpus());
  std::string mem = read_first_match("/proc/meminfo", "MemTotal");  // "24000000 kB"
  if (!mem.empty()) m.set("mem_total_gib", format_fixed(std::atof(mem.c_str()) / (1 << 20), 1));
  utsname u{};
  if (uname(&u) == 0) {
    m.set("kernel", std::string(u.sysname) + " " + u.release + " " + u.machine);
  }
  std::string os = read_first_match("/etc/os-release", "PRETTY_NAME");
  if (!os.empty()) m.set("os", os);
  m.set("libtorch", torch_version);
#ifdef __VERSION__
  m.set("compiler", __VERSION__);
#endif
  m.set("link", link_description());
  if (double rate = link_rate_bits_per_s(); rate > 0) m.set("link_rate_bits_per_s", rate);
  m.set("date_utc", utc_now());
  return m;
}

std::string machine_summary(const std::string& torch_version) {
  std::string cpu = read_first_match("/proc/cpuinfo", "model name");
  utsname u{};
  std::string kernel = uname(&u) == 0 ? std::string(u.release) : "?";
  return (cpu.empty() ? "unknown CPU" : cpu) + ", " + std::to_string(allowed_cpus()) +
         " CPUs, Linux " + kernel + ", libtorch " + torch_version + ", link: " +
         link_description();
}

int limit_openblas_threads(int threads) {
  using SetFn = void (*)(int);
  using GetFn = int (*)();
  auto set = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  auto get = reinterpret_cast<GetFn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (!set || !get) return 0;
  set(threads);
  return get();
}

}  // namespace ddp_bench
