// `ddp_bench collectives`' command line: the usage text and its parsing.
#include "collectives_bench.h"
#include "subcommands.h"

#include <ddp/backend.h>

#include <algorithm>

namespace ddp_bench {

const char* const kCollectivesUsage = R"(usage: ddp_bench collectives [options]
Run once per rank (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the
environment), e.g. ddprun --nproc-per-node 2 ddp_bench collectives. With mpi
or mpi-raw, run under mpirun and set MASTER_ADDR/MASTER_PORT yourself, e.g.
  mpirun -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 \
    ddp_bench collectives --impls gloo,mpi,mpi-raw,c10d
Times allreduce(SUM, float32) of each size with ddp's backends (by name),
libtorch's c10d::ProcessGroupGloo ("c10d") and MPI_Allreduce called directly
("mpi-raw"), interleaved; rank 0 prints a markdown table and writes JSON.

options:
  --sizes LIST      byte sizes, e.g. 4K,64K,1M,16M,256M
                    (default: 4K,16K,64K,256K,1M,4M,16M,64M,256M)
  --iters N         samples per implementation and size (default: as many as
                    fit in --budget-s, between 5 and 500)
  --budget-s S      seconds of timed samples per size, both implementations
                    together, when --iters is not given (default 10)
  --warmup W        untimed samples per implementation and size (default 2)
  --threads T       intra-op threads per rank, torch::set_num_threads (default 1)
  --gloo-threads G  worker threads of each process group (default 1)
  --impls LIST      any of the registered backends (ddp::backend_names()),
                    c10d, mpi-raw (MPI_Allreduce), mpi-raw-nb
                    (MPI_Iallreduce polled with MPI_Test), and
                    shm-handoff / mpi-handoff (shm, mpi
                    with every collective handed to the group's worker
                    thread: inline_bytes 0) (default gloo,c10d)
  --json PATH       rank 0 writes the results there
  --raw             also write every sample (µs, slowest rank) to the JSON
)";

CollectivesConfig parse_collectives_config(Args& args) {
  CollectivesConfig c;
  c.sizes = parse_byte_list(args.take("--sizes").value_or("4K,16K,64K,256K,1M,4M,16M,64M,256M"));
  for (int64_t s : c.sizes) {
    if (s % 4 != 0)
      throw UsageError("size " + std::to_string(s) + " is not a multiple of 4 (float32)");
    if (std::count(c.sizes.begin(), c.sizes.end(), s) > 1) {
      throw UsageError("size " + format_bytes(s) + " is given twice");
    }
  }
  c.fixed_iters = args.take_int("--iters", 1, 1000000).value_or(0);
  c.budget_s = args.take_double("--budget-s", 0.0).value_or(c.budget_s);
  c.warmup = args.take_int("--warmup", 0, 1000000).value_or(c.warmup);
  c.threads = args.take_int("--threads", 1, 1024).value_or(c.threads);
  c.gloo_threads = args.take_int("--gloo-threads", 1, 64).value_or(c.gloo_threads);
  std::vector<std::string> known = ddp::backend_names();
  known.push_back("c10d");
  known.push_back("mpi-raw");
  known.push_back("mpi-raw-nb");
  for (const char* b : {"shm", "mpi"}) {  // the backend with its caller-run path off
    if (std::find(known.begin(), known.end(), b) != known.end()) {
      known.push_back(std::string(b) + "-handoff");
    }
  }
  c.impls = args.take_names("--impls", "gloo,c10d", known);
  c.json_path = args.take("--json").value_or("");
  c.raw = args.take_flag("--raw");
  args.expect_empty();
  return c;
}

}  // namespace ddp_bench
