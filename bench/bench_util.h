// Shared pieces of the bench's programs (ddp_bench, and experiments/paper's
// paper_bench): argument parsing, subcommands, byte sizes, timing statistics
// and markdown tables here; with them, for every subcommand, the small JSON
// writer (json.h) and the description of the machine a result came from
// (machine.h). No libtorch in any of them, so these translation units
// compile fast.
#pragma once

#include "json.h"
#include "machine.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ddp_bench {

// A bad command line; main() prints it with the subcommand's usage.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The arguments after the subcommand: "--name value" or "--name=value".
// Subcommands take what they know; leftovers are an error.
class Args {
 public:
  explicit Args(std::vector<std::string> args);
  // The value of --name, removed from the list; nullopt when absent.
  std::optional<std::string> take(const std::string& name);
  std::optional<int64_t> take_int(const std::string& name, int64_t min, int64_t max);
  std::optional<double> take_double(const std::string& name, double min);
  // --name without a value.
  bool take_flag(const std::string& name);
  // --name's comma-separated names (`fallback` when absent), each one of
  // `known`, in order, duplicates dropped; UsageError listing `known` for
  // any other, or for none.
  std::vector<std::string> take_names(const std::string& name, const std::string& fallback,
                                      const std::vector<std::string>& known);
  // UsageError naming the first argument nobody took.
  void expect_empty() const;

 private:
  std::vector<std::string> args_;
};

// A program's main() around `run(Args(arguments))`: -h or --help prints
// `usage`; a UsageError is printed with the usage (exit status 2), any other
// exception as an error (status 1); `program` names it in the messages.
int run_main(const std::string& program, std::vector<std::string> arguments, const char* usage,
             int (*run)(Args));

// One subcommand of a program such as ddp_bench: `usage` is its --help.
struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(Args);
  const char* const* usage;
};

// main() of a program of subcommands, run once per rank by a launcher:
// `program SUBCOMMAND [options]` runs that subcommand through run_main;
// -h or --help lists the subcommands on stdout (status 0), no subcommand or
// an unknown one lists them on stderr (status 2).
int run_subcommands(const char* program, const std::vector<Subcommand>& subcommands, int argc,
                    char** argv);

// A positive integer with an optional suffix k/K, m/M or g/G worth `k`,
// k^2, k^3; at most 2^40 in all. nullopt for anything else.
std::optional<int64_t> parse_scaled(const std::string& text, int64_t k);
// "4096", "4K", "64k", "1M", "256M", "1G" (binary multiples) -> bytes.
int64_t parse_bytes(const std::string& text);
// "4K,64K,1M" -> {4096, 65536, 1048576}.
std::vector<int64_t> parse_byte_list(const std::string& text);
// 4096 -> "4K", 1048576 -> "1M", 1000 -> "1000".
std::string format_bytes(int64_t bytes);
// Fixed-point with `digits` decimals.
std::string format_fixed(double value, int digits);

using Clock = std::chrono::steady_clock;
inline double micros_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}
inline double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
inline double ms_since(Clock::time_point t) { return ms_between(t, Clock::now()); }
// t moved by `ms` milliseconds (negative: earlier).
inline Clock::time_point plus_ms(Clock::time_point t, double ms) {
  return t +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
}

struct Stats {
  double median = 0, min = 0, max = 0, mean = 0;
  size_t count = 0;
};
Stats summarize(std::vector<double> samples);

// nccl-tests' definitions: algbw = bytes / time; busbw = algbw * 2(n-1)/n
// for allreduce (what each rank's link carries per direction). GB = 1e9 B.
double algbw_gbps(int64_t bytes, double micros);
double allreduce_busbw_gbps(int64_t bytes, double micros, int world_size);

// A GitHub-flavoured markdown table, columns padded to line up.
// `right_aligned[i]` right-aligns column i (numbers).
std::string markdown_table(const std::vector<std::string>& header,
                           const std::vector<std::vector<std::string>>& rows,
                           const std::vector<bool>& right_aligned);

}  // namespace ddp_bench
