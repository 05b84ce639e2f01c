#pragma once

#include <string>
#include <vector>

namespace ddprun {

// Where one rank sits in the job.
struct RankIdentity {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  int nnodes = 1;
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;  // DDP_RESTART_COUNT, TORCHELASTIC_RESTART_COUNT
  std::string flight_recorder_dir;  // DDP_FLIGHT_RECORDER_DIR; "": as inherited
  int elastic_min = 0, elastic_max = 0;  // DDP_ELASTIC_MIN/MAX_WORLD_SIZE; 0: not elastic
  bool joiner = false;                   // joins a running elastic job: no RANK
};

// The rank's complete environment as "NAME=value" strings: `base` (normally
// ddprun's own environ, may be null) without any stale copy of the variables
// ddprun sets, followed by those variables for `id`.
std::vector<std::string> rank_environment(const char* const* base, const RankIdentity& id);

}  // namespace ddprun
