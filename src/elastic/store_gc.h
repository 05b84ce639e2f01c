// Store garbage collection for elastic jobs: a ddp-store that keeps every
// generation's keys grows with each membership change. Once generation N is
// decided, no member reads a generation before N - 1 again: forming N + 1
// reads N's decision, and a member whose last generation is older starts
// over from the first undecided one (Membership::form). So the keys of
// generations below N - 1 go, under a floor that members start from:
// - elastic/floor is set to N - 1 first;
// - then each collected generation's decision, arrival counter and slots,
//   and, where the store lists its keys (libtorch 2.x), everything else
//   under elastic/g<k>/ (its process group's rendezvous keys); on 1.13 those
//   stay, a few per generation;
// - and the member and heartbeat keys of the joiners (fresh ids, each taken
//   once) that left in a collected generation and are no member of N - 1
//   or N. One that comes back (a process stopped, then continued) joins as
//   any process does, and writes its member key again as it registers for
//   a generation (so that its peers judge it by its process, not by its
//   heartbeat alone). A launcher's ids stay: one may be given to a new process, whose
//   duplicate check reads them, and there are as many as ranks launched.
// Progress is kept in elastic/collected, so a pass that fails part-way (the
// store went away) is taken up by the next.
// ddp-store runs it after each decision it sees (tools/store/ddp_store.cpp).
#pragma once

#include <ddp/store.h>

#include <cstdint>

namespace ddp::detail::elastic {

// Collects what generation `latest` (decided) makes unreadable; returns the
// number of keys deleted. Idempotent; a no-op below generation 2.
int64_t collect_generations(c10d::Store& store, int64_t latest);

}  // namespace ddp::detail::elastic
