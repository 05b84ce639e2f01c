// The machine a result came from, and the thread pools a benchmark must
// limit on it. No libtorch here: the caller passes libtorch's version.
#pragma once

#include "json.h"

#include <string>

namespace ddp_bench {

// What a result means nothing without: CPU model, cores, memory, kernel, OS,
// libtorch version, compiler, time, and the link between ranks
// ($DDP_BENCH_LINK, which bench/netem sets; else "loopback" when
// MASTER_ADDR is local, else "network"). `torch_version` comes from the
// caller so that this file does not include libtorch.
Json describe_machine(const std::string& torch_version);
// The one-line summary of describe_machine's result for table captions.
std::string machine_summary(const std::string& torch_version);
// Adds what every result file has after the members that name its benchmark:
// "machine" (describe_machine(torch_version)), then "config". Returns `result`.
Json& add_machine_and_config(Json& result, const std::string& torch_version, Json config);

// Debian's libtorch does its matrix products in OpenBLAS (pthreads build),
// which keeps its own thread pool, one thread per core, whatever
// torch::set_num_threads says: a rank's sgemm then runs on 2 threads that
// spin-yield between calls. Limits it too (returns the count set, or 0 when
// this process has no OpenBLAS). OPENBLAS_NUM_THREADS in the environment has
// the same effect. Call it next to torch::set_num_threads.
int limit_openblas_threads(int threads);

// $DDP_BENCH_LINK_RATE_BPS (bits/s of the shaped link, set by bench/netem), or
// 0 when unknown.
double link_rate_bits_per_s();

}  // namespace ddp_bench
