#!/usr/bin/env python3
"""Where the time of one small collective goes, from a `perf script` dump of
`ddp_bench collectives` ranks recorded with DWARF call graphs: the samples
whose stack passes through ddp::ProcessGroup::allreduce are split by the
innermost frame that says what it is (data, the backend's protocol, MPI,
waiting for peers, the Work's strings, allocation, locks, ...), as shares and,
given the collective's median, as microseconds.

    perf record -D 2500 -e cpu-clock -F 5000 --call-graph dwarf,16384 -o shm.data \\
      build/tools/ddprun/ddprun --nproc-per-node 2 build/bench/ddp_bench collectives \\
      --impls shm --sizes 4K --iters 400000 --warmup 100
    perf script -i shm.data --comm ddp_bench -F comm,tid,ip,sym > shm.txt
    bench/eval/perf_breakdown.py shm.txt --median-us 2.8
"""

import argparse
import collections
import re

# A sample with MPI anywhere on its stack is MPI's (its own copies, locks and
# allocations included).
MPI = ("MPI (Open MPI's libnbc, progress, vader)", r"MPI_|ompi_|mca_|opal_|NBC|nbc")
# (category, pattern of a frame), the first match from the leaf outwards wins.
CATEGORIES = [
    ("shm: spinning until the peers arrive", r"peers_began_op"),
    ("shm: spinning for the peers' data", r"Channel::wait"),
    ("data: copy in, reduce", r"kernel<|memmove|memcpy"),
    ("shm: protocol (steps, descriptor, agreement)", r"Channel::|shm::allreduce|shm::Segment"),
    ("flight recorder", r"flight"),
    ("allocation (Work, strings, closures)",
     r"malloc|free|operator new|operator delete|_int_|tcache|consolidate|unlink_chunk"),
    ("strings: the Work's description",
     r"basic_string|to_string|tensor_detail|toString|where\[|__to_chars|hack_digit|strlen"),
    ("clocks (deadline, completion time)", r"clock_gettime|steady_clock"),
    ("locks (queue, Work)", r"mutex|Mutex|CondVar|condition_variable|futex"),
    ("Work: completion", r"Work::finish|Work::Work|on_complete|finish_after"),
    ("TaskQueue: claim", r"TaskQueue"),
    ("ProcessGroup: argument checks, staging decision",
     r"ProcessGroup::(allreduce|check|note_issued|record)|unsupported_reason|staging"),
    ("libtorch: tensor metadata, refcounts", r"c10::|at::|TensorImpl"),
]


def stacks(path):
    """The stacks of `perf script -F comm,tid,ip,sym`, leaf first."""
    stack = []
    with open(path) as f:
        for line in f:
            frame = re.match(r"\s+[0-9a-f]+ (.*)", line)
            if frame:
                stack.append(frame.group(1))
            elif stack:
                yield stack
                stack = []
    if stack:
        yield stack


def category(stack):
    if any(re.search(MPI[1], frame) for frame in stack):
        return MPI[0]
    for frame in stack:
        for name, pattern in CATEGORIES:
            if re.search(pattern, frame):
                return name
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dump", help="perf script output")
    ap.add_argument("--median-us", type=float, help="the collective's median, to show µs")
    args = ap.parse_args()
    counts = collections.Counter()
    total = 0
    for s in stacks(args.dump):
        total += 1
        if any("ddp::ProcessGroup::allreduce" in f for f in s):
            counts[category(s)] += 1
    inside = sum(counts.values())
    print(f"{inside} of {total} samples inside ProcessGroup::allreduce\n")
    print("| where | share |" + (" µs |" if args.median_us else ""))
    print("|---|---:|" + ("---:|" if args.median_us else ""))
    for name, n in counts.most_common():
        share = n / inside
        us = f" {share * args.median_us:.2f} |" if args.median_us else ""
        print(f"| {name} | {100 * share:.1f} % |{us}")


if __name__ == "__main__":
    main()
