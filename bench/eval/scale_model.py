"""An α–β model of a DDP iteration (docs/benchmarks.md, "A model of scale").

A link is α (seconds per message step: the software stack's latency) and β
(seconds per byte: the inverse of the bandwidth a collective achieves on it).
An all-reduce of n bytes over p nodes costs (Thakur, Rabenseifner, Gropp 2005;
NCCL's bus-bandwidth convention):

    ring          2(p-1)·α + 2(p-1)/p · n·β      (Gloo's default, NCCL's ring)
    tree          2⌈log2 p⌉·α + 2(p-1)/p · n·β   (NCCL's double binary tree: the
                  same bytes per node as a ring, log p steps instead of p)
    hierarchical  the host's own all-reduce of n (shared memory, measured) plus a
                  ring or tree across the p hosts; the host's ranks each carry a
                  slice, so the host's link carries what one ring of n would

A flat ring over p hosts of r ranks each is a ring of p·r steps whose link
carries 2(pr-1)/(pr)·n per direction (one rank per host sends across).

An iteration: forward, then backward; gradients are assumed to be produced at
an even rate in bytes over the backward, so bucket k (in launch order) is
ready when its last byte is; buckets are reduced one after another (one
process group), each starting when it is ready and the previous one is done
(the hierarchical backend pipelines its stages across buckets, the host's
part of one beside the link's part of the one before: for it the model is
pessimistic where the host's part is comparable to the link's);
the optimizer step follows the later of the backward's end and the last
bucket's end. DDP's own costs (the gradient copies into and out of the
buckets) and the cores that ranks, their communication threads and the
kernel's network stack share are not in it: docs/benchmarks.md says what
that leaves out, measured.
"""

import math
import statistics

MB = 1 << 20


class Link:
    """α in seconds, β in seconds per byte; `source` says where they come from."""

    def __init__(self, alpha, beta, source):
        self.alpha, self.beta, self.source = alpha, beta, source

    def gbit_s(self):
        return 8e-9 / self.beta

    def scaled(self, factor, source):
        """The same software latency on a link `factor` times faster."""
        return Link(self.alpha, self.beta / factor, source)

    def to_json(self):
        return {"alpha_us": self.alpha * 1e6, "beta_ns_per_byte": self.beta * 1e9,
                "effective_gbit_s": self.gbit_s(), "source": self.source}


def fit_link(rows, world, source, bandwidth_from=MB):
    """α and β from a ring all-reduce's medians at `world` ranks (rows of
    `ddp_bench collectives --json`: bytes, median_us): β by least squares
    through the sizes of at least `bandwidth_from` bytes (where the bandwidth
    term dominates); α from the smallest size's fastest sample, what it has
    beyond n·β. Not its median: a 4 KB all-reduce's median can catch the
    kernel's delayed acknowledgements (2.9 ms against a 0.14 ms fastest at
    1 Gbit/s here), and sizes between are left out, as a shaped link's
    token bucket lets a burst through at the veth's own speed."""
    if world < 2:
        raise ValueError("fit_link: a link needs at least 2 ranks, got %d" % world)
    steps = 2 * (world - 1)
    volume = 2.0 * (world - 1) / world
    points = sorted((r["bytes"], r["median_us"] * 1e-6, r["min_us"] * 1e-6) for r in rows)
    big = [(n, t) for n, t, _ in points if n >= bandwidth_from]
    if len({n for n, _ in big}) < 2:
        raise ValueError("fit_link: need two sizes of at least %d bytes" % bandwidth_from)
    # t = c + volume·n·β over the big sizes, least squares in (n, t).
    mean_n = statistics.mean(n for n, _ in big)
    mean_t = statistics.mean(t for _, t in big)
    slope = sum((n - mean_n) * (t - mean_t) for n, t in big) / \
        sum((n - mean_n) ** 2 for n, _ in big)
    beta = slope / volume
    n0, _, fastest = points[0]
    alpha = max(fastest - volume * n0 * beta, 0.0) / steps
    return Link(alpha, beta, source)


def interpolate(table, n):
    """Seconds for n bytes from a {bytes: seconds} table: linear between the
    two nearest sizes, proportional beyond the largest, the smallest's below."""
    sizes = sorted(table)
    if n <= sizes[0]:
        return table[sizes[0]]
    if n >= sizes[-1]:
        return table[sizes[-1]] * n / sizes[-1]
    hi = next(i for i, s in enumerate(sizes) if s >= n)
    a, b = sizes[hi - 1], sizes[hi]
    return table[a] + (table[b] - table[a]) * (n - a) / (b - a)


def ring(n, p, link):
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * link.alpha + 2.0 * (p - 1) / p * n * link.beta


def tree(n, p, link):
    if p <= 1:
        return 0.0
    return 2 * math.ceil(math.log2(p)) * link.alpha + 2.0 * (p - 1) / p * n * link.beta


def allreduce_s(algorithm, n, nodes, ranks_per_node, link, host_allreduce=None):
    """Seconds to all-reduce n bytes. algorithm: "ring" (flat over every
    rank), "hierarchical" (the host's all-reduce, then a ring across hosts),
    "hierarchical-tree" (the same with a tree across hosts).
    `host_allreduce`: bytes -> seconds of the host's own all-reduce (needed
    when ranks_per_node > 1 and the algorithm is hierarchical)."""
    if algorithm == "ring":
        world = nodes * ranks_per_node
        if nodes <= 1:
            return host_allreduce(n) if world > 1 else 0.0
        return ring(n, world, link)
    host = host_allreduce(n) if ranks_per_node > 1 else 0.0
    across = tree if algorithm == "hierarchical-tree" else ring
    return host + across(n, nodes, link)


def iteration_s(compute, buckets, reduce_s):
    """Predicted seconds per iteration. compute: {"forward", "backward",
    "step"} in seconds (the same model run locally, on the same cores);
    buckets: bytes per bucket in launch order; reduce_s: bytes -> seconds."""
    forward, backward = compute["forward"], compute["backward"]
    total = float(sum(buckets)) or 1.0
    done, produced = forward, 0.0
    for size in buckets:
        produced += size
        ready = forward + backward * produced / total
        done = max(done, ready) + reduce_s(size)
    return max(forward + backward, done) + compute["step"]
