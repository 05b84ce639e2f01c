#include "bench_util.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace ddp_bench {

// --- arguments --------------------------------------------------------------

int run_main(const std::string& program, std::vector<std::string> arguments, const char* usage,
             int (*run)(Args)) {
  for (const auto& a : arguments) {
    if (a == "-h" || a == "--help") {
      std::fputs(usage, stdout);
      return 0;
    }
  }
  try {
    return run(Args(std::move(arguments)));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n\n%s", program.c_str(), e.what(), usage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
    return 1;
  }
}

namespace {

void print_subcommands(std::FILE* out, const char* program,
                       const std::vector<Subcommand>& subcommands) {
  std::fprintf(out,
               "usage: %s <subcommand> [options]   (run once per rank, e.g. under\n"
               "       ddprun --nproc-per-node 2 %s <subcommand> ...)\n\nsubcommands:\n",
               program, program);
  for (const auto& s : subcommands) std::fprintf(out, "  %-12s %s\n", s.name, s.summary);
  std::fprintf(out, "\n`%s <subcommand> --help` describes its options.\n", program);
}

}  // namespace

int run_subcommands(const char* program, const std::vector<Subcommand>& subcommands, int argc,
                    char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    print_subcommands(argc < 2 ? stderr : stdout, program, subcommands);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& s : subcommands) {
    if (std::strcmp(argv[1], s.name) != 0) continue;
    return run_main(std::string(program) + " " + s.name, {argv + 2, argv + argc}, *s.usage,
                    s.run);
  }
  std::fprintf(stderr, "%s: unknown subcommand '%s'\n\n", program, argv[1]);
  print_subcommands(stderr, program, subcommands);
  return 2;
}

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
  } catch (const std::exception&) {}
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
  } catch (const std::exception&) {}
  throw UsageError(name + " expects a number >= " + format_fixed(min, 1) + ", got '" + *text + "'");
}

bool Args::take_flag(const std::string& name) {
  auto it = std::find(args_.begin(), args_.end(), name);
  if (it == args_.end()) return false;
  args_.erase(it);
  return true;
}

std::vector<std::string> Args::take_names(const std::string& name, const std::string& fallback,
                                          const std::vector<std::string>& known) {
  std::string all;
  for (const auto& k : known) all += (all.empty() ? "" : ", ") + k;
  std::vector<std::string> out;
  std::stringstream list(take(name).value_or(fallback));
  for (std::string item; std::getline(list, item, ',');) {
    if (std::find(known.begin(), known.end(), item) == known.end()) {
      throw UsageError(name + ": unknown '" + item + "' (known: " + all + ")");
    }
    if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
  }
  if (out.empty()) throw UsageError(name + " is empty (known: " + all + ")");
  return out;
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
      case 'k':
      case 'K':
        unit = k;
        break;
      case 'm':
      case 'M':
        unit = k * k;
        break;
      case 'g':
      case 'G':
        unit = k * k * k;
        break;
      default:
        break;
    }
    if (unit != 1) digits.pop_back();
  }
  try {
    size_t used = 0;
    long long v = std::stoll(digits, &used);
    if (used == digits.size() && v > 0 && v <= (int64_t{1} << 40) / unit) return v * unit;
  } catch (const std::exception&) {}
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

}  // namespace ddp_bench
