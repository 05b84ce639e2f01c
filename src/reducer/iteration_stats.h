// IterationStats from what a synchronized iteration saw (statistics.cpp).
#pragma once

#include <ddp/statistics.h>

#include "reducer/bucket_set.h"
#include "reducer/iteration.h"

namespace ddp::detail {

// Fills the timings and bucket sizes of `stats` for the iteration `it` that
// just ended: its gradient hooks ended at `compute_end`, its last bucket was
// reduced at `comm_end`.
void record_timings(IterationStats& stats, const Iteration& it, const BucketSet& buckets,
                    Iteration::Clock::time_point compute_end,
                    Iteration::Clock::time_point comm_end);

}  // namespace ddp::detail
