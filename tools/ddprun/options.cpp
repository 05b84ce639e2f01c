// Command-line parsing for ddprun.
//
// Flags come before the program; the first argument that does not start with
// '-' (or everything after a bare "--") is the program and its arguments,
// which are passed through untouched. Every flag accepts both "--flag VALUE"
// and "--flag=VALUE", and '_' may be used instead of '-' inside flag names
// (torchrun spells them --nproc_per_node). Values are checked strictly: an
// error names the flag, the expected form, and what was given.
#include "options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace ddprun {
namespace {

constexpr const char* kExpectNproc = "--nproc-per-node N with N an integer >= 1";
constexpr const char* kExpectNnodes =
    "--nnodes M with M an integer >= 1, or MIN:MAX (elastic: 1 <= MIN <= MAX machines)";
constexpr const char* kExpectNodeRank = "--node-rank K with K an integer in [0, nnodes)";
constexpr const char* kExpectAddr = "--master-addr HOST with HOST a host name or IP address";
constexpr const char* kExpectPort = "--master-port P with P an integer in [1, 65535]";
constexpr const char* kExpectGrace = "--grace-period-s S with S a number of seconds >= 0";
constexpr const char* kExpectRestarts = "--max-restarts K with K an integer in [0, 1000]";
constexpr const char* kExpectFlight = "--flight-recorder DIR with DIR a directory";
constexpr const char* kExpectElastic = "--elastic MIN:MAX with 1 <= MIN <= MAX world sizes";

// Strict decimal integer: optional '-', digits only, within [lo, hi].
std::optional<long> parse_integer(const std::string& text, long lo, long hi) {
  if (text.empty()) return std::nullopt;
  const char first = text[0];
  if (first != '-' && (first < '0' || first > '9')) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) return std::nullopt;
  if (value < lo || value > hi) return std::nullopt;
  return value;
}

// Strict non-negative decimal number of seconds (e.g. "5", "0.5").
std::optional<double> parse_seconds(const std::string& text) {
  if (text.empty()) return std::nullopt;
  const char first = text[0];
  if (first != '.' && (first < '0' || first > '9')) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size()) return std::nullopt;
  if (!std::isfinite(value) || value < 0.0 || value > 1e6) return std::nullopt;
  return value;
}

std::string bad_value(const std::string& flag, const char* expected, const std::string& got) {
  return flag + ": expected " + expected + ", got '" + got + "'";
}

// "--nproc_per_node" -> "--nproc-per-node"; the part after '=' is not touched.
std::string canonical_flag_name(const std::string& name) {
  std::string out = name;
  for (std::size_t i = 2; i < out.size(); ++i) {
    if (out[i] == '_') out[i] = '-';
  }
  return out;
}

// The expected form of a valued flag, or nullptr when flag takes no value.
const char* expected_form(const std::string& flag) {
  if (flag == "--nproc-per-node") return kExpectNproc;
  if (flag == "--nnodes") return kExpectNnodes;
  if (flag == "--node-rank") return kExpectNodeRank;
  if (flag == "--master-addr") return kExpectAddr;
  if (flag == "--master-port") return kExpectPort;
  if (flag == "--grace-period-s") return kExpectGrace;
  if (flag == "--max-restarts") return kExpectRestarts;
  if (flag == "--flight-recorder") return kExpectFlight;
  if (flag == "--elastic") return kExpectElastic;
  return nullptr;
}

bool is_switch(const std::string& flag) {
  return flag == "--no-prefix" || flag == "--join" || flag == "--help" || flag == "-h";
}

// "MIN:MAX" with 1 <= MIN <= MAX; nullopt otherwise.
std::optional<std::pair<int, int>> parse_range(const std::string& value) {
  const auto colon = value.find(':');
  if (colon == std::string::npos) return std::nullopt;
  const auto lo = parse_integer(value.substr(0, colon), 1, 1 << 20);
  const auto hi = parse_integer(value.substr(colon + 1), 1, 1 << 20);
  if (!lo || !hi || *lo > *hi) return std::nullopt;
  return std::make_pair(static_cast<int>(*lo), static_cast<int>(*hi));
}

// Applies one valued flag; returns an error message or "". `elastic_nodes`:
// --nnodes MIN:MAX, turned into world sizes once --nproc-per-node is known.
std::string apply_value(const std::string& flag, const std::string& value, Options& opts,
                        bool& addr_given, std::optional<std::pair<int, int>>& elastic_nodes) {
  if (flag == "--nproc-per-node") {
    const auto n = parse_integer(value, 1, 1 << 20);
    if (!n) return bad_value(flag, kExpectNproc, value);
    opts.nproc_per_node = static_cast<int>(*n);
  } else if (flag == "--nnodes" && value.find(':') != std::string::npos) {
    const auto range = parse_range(value);
    if (!range) return bad_value(flag, kExpectNnodes, value);
    elastic_nodes = range;
  } else if (flag == "--nnodes") {
    const auto n = parse_integer(value, 1, 1 << 20);
    if (!n) return bad_value(flag, kExpectNnodes, value);
    opts.nnodes = static_cast<int>(*n);
  } else if (flag == "--node-rank") {
    const auto n = parse_integer(value, 0, 1 << 20);
    if (!n) return bad_value(flag, kExpectNodeRank, value);
    opts.node_rank = static_cast<int>(*n);
  } else if (flag == "--master-addr") {
    if (value.empty()) return bad_value(flag, kExpectAddr, value);
    opts.master_addr = value;
    addr_given = true;
  } else if (flag == "--master-port") {
    const auto n = parse_integer(value, 1, 65535);
    if (!n) return bad_value(flag, kExpectPort, value);
    opts.master_port = static_cast<int>(*n);
  } else if (flag == "--grace-period-s") {
    const auto s = parse_seconds(value);
    if (!s) return bad_value(flag, kExpectGrace, value);
    opts.grace_period_s = *s;
  } else if (flag == "--max-restarts") {
    const auto n = parse_integer(value, 0, 1000);
    if (!n) return bad_value(flag, kExpectRestarts, value);
    opts.max_restarts = static_cast<int>(*n);
  } else if (flag == "--flight-recorder") {
    if (value.empty()) return bad_value(flag, kExpectFlight, value);
    opts.flight_recorder_dir = value;
  } else if (flag == "--elastic") {
    const auto range = parse_range(value);
    if (!range) return bad_value(flag, kExpectElastic, value);
    opts.elastic_min = range->first;
    opts.elastic_max = range->second;
  }
  return "";
}

// Checks that need every flag: required flags and cross-flag rules.
std::string validate(const Options& opts, bool addr_given) {
  if (opts.nproc_per_node == 0) {
    return std::string("--nproc-per-node is required; expected ") + kExpectNproc;
  }
  if (opts.node_rank >= opts.nnodes) {
    return "--node-rank: expected an integer in [0, " + std::to_string(opts.nnodes) +
           ") because --nnodes is " + std::to_string(opts.nnodes) + ", got '" +
           std::to_string(opts.node_rank) + "'";
  }
  if (opts.nnodes > 1 && (!addr_given || !opts.master_port)) {
    return "--nnodes " + std::to_string(opts.nnodes) +
           " requires --master-addr HOST and --master-port P (the same on every node)";
  }
  if (opts.join && (opts.elastic_min == 0 || !opts.master_port)) {
    return "--join requires --elastic MIN:MAX (or --nnodes MIN:MAX) and --master-port P (the "
           "running job's store)";
  }
  if (opts.elastic_min > 0 && opts.nnodes > 1) {
    return "--elastic runs on one node: start more ranks elsewhere with --elastic MIN:MAX "
           "--join --master-addr A --master-port P (the first ddprun's store)";
  }
  if (opts.elastic_min > 0 && opts.max_restarts > 0) {
    return "--elastic and --max-restarts do not go together: an elastic job re-forms in "
           "process instead of restarting";
  }
  if (opts.command.empty()) {
    return "missing the program to run; expected ddprun --nproc-per-node N [flags] [--] "
           "program [args...]";
  }
  return "";
}

}  // namespace

ParseResult parse_options(const std::vector<std::string>& args) {
  ParseResult result;
  Options& opts = result.opts;
  bool addr_given = false;
  std::optional<std::pair<int, int>> elastic_nodes;  // --nnodes MIN:MAX
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-') break;  // the program starts here

    const std::size_t eq = arg.find('=');
    const std::string flag = canonical_flag_name(arg.substr(0, eq));
    const bool has_inline_value = eq != std::string::npos;

    if (is_switch(flag)) {
      if (has_inline_value) {
        result.error = flag + ": takes no value, got '" + arg + "'";
        return result;
      }
      if (flag == "--no-prefix") {
        opts.prefix_output = false;
      } else if (flag == "--join") {
        opts.join = true;
      } else {
        result.outcome = ParseOutcome::HELP;
        return result;
      }
      continue;
    }
    const char* expected = expected_form(flag);
    if (expected == nullptr) {
      result.error = "unknown flag '" + arg.substr(0, eq) +
                     "'; expected --nproc-per-node, --nnodes, --node-rank, --master-addr, "
                     "--master-port, --no-prefix, --grace-period-s, --max-restarts, "
                     "--flight-recorder, --elastic, --join, --help, "
                     "or -- before the program";
      return result;
    }
    std::string value;
    if (has_inline_value) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      result.error = flag + ": missing value; expected " + expected;
      return result;
    }
    result.error = apply_value(flag, value, opts, addr_given, elastic_nodes);
    if (!result.error.empty()) return result;
  }
  opts.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (elastic_nodes) {
    if (opts.elastic_min > 0) {
      result.error = "--nnodes MIN:MAX and --elastic MIN:MAX say the same; give one";
      return result;
    }
    opts.elastic_min = elastic_nodes->first * opts.nproc_per_node;
    opts.elastic_max = elastic_nodes->second * opts.nproc_per_node;
  }

  result.error = validate(opts, addr_given);
  if (result.error.empty()) result.outcome = ParseOutcome::RUN;
  return result;
}

std::string usage_text() {
  return R"(usage: ddprun --nproc-per-node N [--nnodes M --node-rank K --master-addr A --master-port P]
              [--no-prefix] [--grace-period-s S] [--max-restarts K]
              [--flight-recorder DIR] [--elastic MIN:MAX | --nnodes MIN:MAX [--join]]
              [--] program [args...]

Starts N copies ("ranks") of program on this node, each with the environment a
ddp (or torch.distributed) program reads to join the job, supervises them, and
stops them all when one fails.

flags (both "--flag VALUE" and "--flag=VALUE" work; "_" may replace "-"):
  --nproc-per-node N   ranks to start on this node (required, N >= 1)
  --nnodes M           nodes taking part in the job (default 1)
  --node-rank K        index of this node, 0 <= K < M (default 0)
  --master-addr A      host of the node running rank 0 (default 127.0.0.1;
                       required when M > 1)
  --master-port P      TCP port on A for the rendezvous, 1..65535 (default: a
                       free port on A when M = 1; required when M > 1)
  --no-prefix          do not prefix output lines with "[rank R] "; ranks then
                       write to ddprun's stdout/stderr directly
  --grace-period-s S   seconds to wait after SIGTERM/SIGINT before SIGKILL
                       (default 5)
  --max-restarts K     when a rank fails, stop every rank and start them all
                       again, on a fresh rendezvous port (single node, no
                       --master-port), up to K times (default 0); not after
                       ddprun's own SIGINT/SIGTERM or an exec failure
  --flight-recorder DIR
                       every rank's flight recorder dumps into DIR (made when
                       missing; its *.flight files are removed at each start);
                       after a failed job ddprun says in one line which rank
                       stopped where (as ddp-flight DIR does). Default:
                       $DDP_FLIGHT_RECORDER_DIR when set
  --elastic MIN:MAX    elastic training in process (ddp::ElasticRunner): ddprun
                       starts ddp-store on A:P (it outlives any rank and prints
                       one line per membership change), and a rank that fails
                       does not stop the others while at least MIN of these
                       ranks run; the survivors re-form without it. When a rank
                       ends well the job is done (stopped ranks are continued,
                       the rest killed after the grace period). MIN and MAX
                       bound the world size (DDP_ELASTIC_MIN/MAX_WORLD_SIZE).
                       One node; other machines add ranks with --join
  --nnodes MIN:MAX     torchrun's form of --elastic: MIN to MAX machines of N
                       ranks each (--elastic MIN*N:MAX*N)
  --join               with --elastic and --master-port P: start N ranks that
                       join the elastic job whose store is at A:P (no store
                       here; each rank takes a fresh member id, no RANK)
  -h, --help           print this text and exit
  --                   end of ddprun's flags; the next argument is the program

environment of each rank (added to ddprun's own environment):
  MASTER_ADDR, MASTER_PORT   A and P
  RANK                       global rank, K * N + LOCAL_RANK
  WORLD_SIZE                 M * N
  LOCAL_RANK                 0 .. N-1, the rank on this node
  LOCAL_WORLD_SIZE           N
  GROUP_RANK, NODE_RANK      K
  GROUP_WORLD_SIZE           M
  DDP_RESTART_COUNT,         how many times the job was restarted (0 first)
  TORCHELASTIC_RESTART_COUNT
  DDP_FLIGHT_RECORDER_DIR    DIR, with --flight-recorder
  DDP_JOB_SECRET             kept when set; else, on one node, a fresh random
                             secret that every rank proves at the rendezvous
                             (docs/security.md)
  DDP_ELASTIC_MIN_WORLD_SIZE,
  DDP_ELASTIC_MAX_WORLD_SIZE MIN and MAX, with --elastic (RANK is left unset
                             with --join)

exit status:
  0        every rank exited 0
  S        the first rank that failed exited with status S (128+sig when it
           was killed by signal sig); the other ranks got SIGTERM, then
           SIGKILL after the grace period (with --max-restarts: of the last
           attempt, whose failure ddprun names when it gives up)
           With --elastic: 0 when the ranks still running at the end all exit
           0 (a rank that failed while MIN others ran is reported, not
           decisive); S of the rank whose failure left fewer than MIN
  128+sig  ddprun got SIGINT or SIGTERM (forwarded to every rank)
  2        bad arguments
  126/127  the program could not be executed / was not found
)";
}

}  // namespace ddprun
