#include "rendezvous/slurm.h"

#include "rendezvous/env.h"

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
    throw InvalidArgument("ddp: " + std::string(what) + "='" + nodelist +
                          "' is not a Slurm host list (e.g. node[01-04],gpu7); set MASTER_ADDR "
                          "to rank 0's host instead");
  }
  return host;
}

int slurm_step_port(long job_id, long step_id) {
  return 20000 + 16 * static_cast<int>(job_id % 800) + static_cast<int>(step_id % 16);
}

SlurmMaster slurm_master_from_env() {
  SlurmMaster master;
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}) {
    if (auto list = env_string(name)) {
      master.addr = first_host_of_slurm_nodelist(*list, name);
      master.addr_source = name;
      break;
    }
  }
  if (auto job = env_int("SLURM_JOB_ID", 0, 1L << 40)) {
    // A batch script's own step has no number: it takes step 0's port.
    const auto step = env_string("SLURM_STEP_ID");
    const bool numbered = step && step->find_first_not_of("0123456789") == std::string::npos;
    master.port = slurm_step_port(*job, numbered ? *env_int("SLURM_STEP_ID", 0, 1L << 40) : 0);
  }
  return master;
}

}  // namespace ddp::detail
