// The rendezvous barrier on a store: every rank announces itself, then waits
// until all `size` ranks have, or raises TimeoutError saying how many of how
// many arrived and which ranks are missing.
#pragma once

#include <ddp/store.h>

#include <chrono>
#include <string>
#include <vector>

namespace ddp::detail {

// Polls `store` until `key` exists (true) or `deadline` passes (false).
// These waits end at once, with CommunicationError, when this process's
// group set-ups are cancelled (base/setup_cancel.h).
bool wait_for_key(const StorePtr& store, const std::string& key,
                  std::chrono::steady_clock::time_point deadline);
// Until every one of `keys` exists (true) or `deadline` passes (false).
bool wait_for_keys(const StorePtr& store, const std::vector<std::string>& keys,
                   std::chrono::steady_clock::time_point deadline);

// `label` names the rendezvous in keys and errors ("rendezvous", "gloo"):
// the operation of its TimeoutError, whose peers are the missing ranks.
void wait_for_all_ranks(const StorePtr& store, int rank, int size,
                        std::chrono::milliseconds timeout, const std::string& label);

// Every rank's `mine`, gathered through `store` under keys `prefix`<rank>.
// After `timeout`, TimeoutError: "ddp: rank R of N: <what>: timed out after
// T ms: A of N ranks arrived (missing: ...)<why_missing>", its operation
// `what` and its peers the missing ranks.
std::vector<std::string> allgather_on_store(const StorePtr& store, const std::string& prefix,
                                            int rank, int size, const std::string& mine,
                                            std::chrono::milliseconds timeout,
                                            const std::string& what,
                                            const std::string& why_missing);

}  // namespace ddp::detail
