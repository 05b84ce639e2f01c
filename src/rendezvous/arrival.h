// The rendezvous barrier on a store: every rank announces itself, then waits
// until all `size` ranks have, or raises TimeoutError saying how many of how
// many arrived and which ranks are missing.
#pragma once

#include <ddp/store.h>

#include <chrono>
#include <string>

namespace ddp::detail {

// `label` names the rendezvous in keys and errors ("rendezvous", "gloo").
void wait_for_all_ranks(const StorePtr& store, int rank, int size,
                        std::chrono::milliseconds timeout, const std::string& label);

}  // namespace ddp::detail
