#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddprun {

// Everything ddprun was asked to do, as parsed from its command line.
struct Options {
  int nproc_per_node = 0;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::optional<int> master_port;  // unset: pick a free port (nnodes == 1 only)
  bool prefix_output = true;
  double grace_period_s = 5.0;
  int max_restarts = 0;  // restarts of the whole job after a rank fails
  // Where the ranks' flight recorders dump (DDP_FLIGHT_RECORDER_DIR); ""
  // leaves the variable as ddprun's environment has it.
  std::string flight_recorder_dir;
  // --elastic MIN:MAX: the ranks train through ElasticRunner (ddp/elastic.h)
  // on a store ddprun starts (ddp-store); a rank that fails does not stop the
  // others while at least MIN run. 0: not elastic.
  // --nnodes MIN:MAX (torchrun's form) sets them to MIN and MAX machines of
  // --nproc-per-node ranks each.
  int elastic_min = 0, elastic_max = 0;
  // --join: the ranks join the running elastic job at --master-addr/--port
  // (no store started here; each takes a fresh member id).
  bool join = false;
  std::vector<std::string> command;  // the program, then its arguments
};

enum class ParseOutcome { RUN, HELP, ERROR };

struct ParseResult {
  ParseOutcome outcome = ParseOutcome::ERROR;
  Options opts;
  std::string error;  // one line, without the "ddprun: " prefix
};

// Parses ddprun's arguments (argv without argv[0]). Never exits or prints.
ParseResult parse_options(const std::vector<std::string>& args);

// The text printed by `ddprun --help`.
std::string usage_text();

}  // namespace ddprun
