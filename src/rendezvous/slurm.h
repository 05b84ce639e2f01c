// Where an srun step's ranks meet when the user sets no MASTER_ADDR or
// MASTER_PORT: every task of a step sees the same Slurm variables, so each
// derives the same address and port with no exchange.
#pragma once

#include <optional>
#include <string>

namespace ddp::detail {

// The first host of a Slurm host list in its compressed form, as Slurm
// writes SLURM_STEP_NODELIST: "node[07-09,12],gpu3" -> "node07" (zero
// padding kept; several bracket groups in one name each give their first
// value). InvalidArgument names `what` for an empty or unbalanced list.
std::string first_host_of_slurm_nodelist(const std::string& nodelist, const char* what);

// The port of a step: 20000 + 16 * (job id mod 798) + step id mod 16, in
// [20000, 32768), below Linux's ephemeral ports, so that concurrent steps of
// one job (up to 16) and jobs whose ids differ by less than 798 get different
// ports.
int slurm_step_port(long job_id, long step_id);

struct SlurmMaster {
  std::string addr;         // "" outside an srun step
  std::string addr_source;  // the variable it came from, for errors
  int port = -1;            // -1 outside an srun step
};

// The master address and port derived from an srun step's variables: task 0
// runs on the step's first node under Slurm's block and cyclic distributions
// (SLURM_STEP_NODELIST), and the port comes from SLURM_JOB_ID and
// SLURM_STEP_ID. Nothing outside a step (a batch script's own process).
SlurmMaster slurm_master_from_env();

}  // namespace ddp::detail
