#include "rendezvous/slurm.h"

#include "base/env.h"

#include <ddp/errors.h>

namespace ddp::detail {

std::string first_host_of_slurm_nodelist(const std::string& nodelist, const char* what) {
  std::string host;
  bool in_brackets = false;
  bool took_first = false;  // inside brackets: the first value is complete
  for (char c : nodelist) {
    if (!in_brackets && c == ',') break;  // the next host name
    if (c == '[') {
      if (in_brackets) break;  // nested: malformed, reported below
      in_brackets = true;
      took_first = false;
    } else if (c == ']') {
      if (!in_brackets) {
        in_brackets = true;  // unbalanced: reported below
        break;
      }
      in_brackets = false;
    } else if (in_brackets) {
      if (c == ',' || c == '-') took_first = true;
      if (!took_first) host += c;
    } else {
      host += c;
    }
  }
  if (host.empty() || in_brackets) {
    throw InvalidArgument(std::string(what) + "='" + nodelist +
                          "' is not a Slurm host list (e.g. node[01-04],gpu7); set MASTER_ADDR "
                          "to rank 0's host instead");
  }
  return host;
}

int slurm_step_port(long job_id, long step_id) {
  return 20000 + 16 * static_cast<int>(job_id % 798) + static_cast<int>(step_id % 16);
}

SlurmMaster slurm_master_from_env() {
  // Only inside an srun step: a program started by the batch script itself
  // (no step, SLURM_PROCID 0) gets nothing, and says MASTER_ADDR is unset.
  SlurmMaster master;
  const auto nodes = env_string("SLURM_STEP_NODELIST");
  const auto job = env_int("SLURM_JOB_ID", 0, 1L << 40);
  const auto step = env_int("SLURM_STEP_ID", 0, 1L << 40);
  if (!nodes || !job || !step) return master;
  master.addr = first_host_of_slurm_nodelist(*nodes, "SLURM_STEP_NODELIST");
  master.addr_source = "SLURM_STEP_NODELIST";
  master.port = slurm_step_port(*job, *step);
  return master;
}

}  // namespace ddp::detail
