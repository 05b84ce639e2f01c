// Who launched this process, from the launchers' variables (ddp/init.h,
// LaunchInfo): torchrun's (and ddprun's), Open MPI's, Slurm's.
#include <ddp/init.h>

#include <ddp/errors.h>

#include "base/env.h"
#include "rendezvous/slurm.h"

namespace ddp {
namespace {

constexpr long kMaxRanks = 1 << 20;

}  // namespace

LaunchInfo launch_info_from_env() {
  LaunchInfo info;
  struct Source {
    const char *name, *rank, *size, *local_rank, *local_size;
  };
  const Source sources[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
  };
  for (const auto& s : sources) {
    auto rank = detail::env_int(s.rank, 0, kMaxRanks);
    if (!rank) continue;
    auto size = detail::env_int(s.size, 1, kMaxRanks);
    if (!size) {
      throw InvalidArgument(std::string(s.rank) + " is set but " + s.size +
                            " is not; expected the number of ranks, e.g. " + s.size + "=2");
    }
    if (*rank >= *size) {
      throw InvalidArgument(std::string(s.rank) + "=" + std::to_string(*rank) + " is outside [0, " +
                            s.size + "=" + std::to_string(*size) + ")");
    }
    info.rank = static_cast<int>(*rank);
    info.world_size = static_cast<int>(*size);
    info.local_rank = static_cast<int>(detail::env_int(s.local_rank, 0, kMaxRanks).value_or(0));
    if (s.local_size) {
      info.local_world_size =
          static_cast<int>(detail::env_int(s.local_size, 1, kMaxRanks).value_or(1));
    }
    info.source = s.name;
    break;
  }
  info.master_addr = detail::env_string("MASTER_ADDR").value_or("");
  info.master_port = static_cast<int>(detail::env_int("MASTER_PORT", 1, 65535).value_or(-1));
  if (info.source == "slurm" && (info.master_addr.empty() || info.master_port < 0)) {
    const detail::SlurmMaster slurm = detail::slurm_master_from_env();
    if (info.master_addr.empty()) info.master_addr = slurm.addr;
    if (info.master_port < 0) info.master_port = slurm.port;
  }
  return info;
}

}  // namespace ddp
