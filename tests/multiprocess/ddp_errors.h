// DdpBadInput.* of ddp_equivalence (ddp_errors.cpp).
#pragma once

#include <ddp/process_group.h>

namespace ddp::testing {

// Misuse in training (a skipped backward, an extra step, a backward no DDP
// forward prepared, different collectives) and bad input (models that
// differ across ranks, ...): every rank raises, naming the rank and what it
// did, and the ranks are in step again afterwards.
void bad_input(const ProcessGroupPtr& pg);

}  // namespace ddp::testing
