#!/usr/bin/python3
"""The α–β model's arithmetic (scale_model.py), on numbers worked by hand.
CTest runs it as bench_scale_model."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import scale_model as model  # noqa: E402

MB = 1 << 20


def collective_rows(alpha, beta, world, sizes):
    """What `ddp_bench collectives --json` would hold for an exact ring."""
    rows = []
    for n in sizes:
        t = 2 * (world - 1) * alpha + 2.0 * (world - 1) / world * n * beta
        rows.append({"bytes": n, "median_us": t * 1e6, "min_us": t * 1e6})
    return rows


class FitLink(unittest.TestCase):
    def test_recovers_alpha_and_beta_of_an_exact_ring(self):
        rows = collective_rows(50e-6, 8e-9, 2, [4096, 1 * MB, 16 * MB, 64 * MB])
        link = model.fit_link(rows, 2, "synthetic")
        self.assertAlmostEqual(link.alpha * 1e6, 50.0, places=6)
        self.assertAlmostEqual(link.beta * 1e9, 8.0, places=9)
        self.assertAlmostEqual(link.gbit_s(), 1.0, places=9)

    def test_alpha_comes_from_the_fastest_sample_not_the_median(self):
        rows = collective_rows(50e-6, 8e-9, 2, [4096, 1 * MB, 64 * MB])
        rows[0]["median_us"] = 3000.0  # a delayed acknowledgement in most samples
        self.assertAlmostEqual(model.fit_link(rows, 2, "x").alpha * 1e6, 50.0, places=6)

    def test_needs_two_sizes_in_the_bandwidth_regime(self):
        with self.assertRaises(ValueError):
            model.fit_link(collective_rows(1e-5, 1e-9, 2, [4096, 64 * MB]), 2, "x")

    def test_scaled_keeps_alpha(self):
        link = model.Link(50e-6, 8e-9, "x").scaled(10, "y")
        self.assertEqual((link.alpha, link.beta, link.source), (50e-6, 8e-10, "y"))


class Collectives(unittest.TestCase):
    link = model.Link(10e-6, 1e-9, "x")

    def test_ring(self):
        # 4 ranks: 6 steps of α, 1.5 n of β
        self.assertAlmostEqual(model.ring(1000, 4, self.link), 6e-5 + 1.5e-6)
        self.assertEqual(model.ring(1000, 1, self.link), 0.0)

    def test_tree_takes_log_steps_and_the_rings_bytes(self):
        self.assertAlmostEqual(model.tree(1000, 8, self.link), 6 * 10e-6 + 1.75e-6)
        self.assertAlmostEqual(model.tree(1000, 5, self.link), 6 * 10e-6 + 1.6e-6)

    def test_hierarchical_adds_the_host_and_rings_the_hosts(self):
        host = lambda n: 1e-3  # noqa: E731
        t = model.allreduce_s("hierarchical", 1000, 4, 2, self.link, host)
        self.assertAlmostEqual(t, 1e-3 + model.ring(1000, 4, self.link))
        t = model.allreduce_s("hierarchical-tree", 1000, 4, 2, self.link, host)
        self.assertAlmostEqual(t, 1e-3 + model.tree(1000, 4, self.link))
        # one host: its own all-reduce only; one rank per host: no host part
        self.assertEqual(model.allreduce_s("hierarchical", 1000, 1, 2, self.link, host), 1e-3)
        self.assertEqual(model.allreduce_s("hierarchical", 1000, 4, 1, self.link, host),
                         model.ring(1000, 4, self.link))

    def test_flat_ring_counts_every_rank(self):
        self.assertEqual(model.allreduce_s("ring", 1000, 4, 2, self.link),
                         model.ring(1000, 8, self.link))

    def test_interpolate(self):
        table = {1000: 1.0, 3000: 2.0}
        self.assertEqual(model.interpolate(table, 10), 1.0)
        self.assertEqual(model.interpolate(table, 2000), 1.5)
        self.assertEqual(model.interpolate(table, 6000), 4.0)


class Iteration(unittest.TestCase):
    compute = {"forward": 0.010, "backward": 0.040, "step": 0.005}

    def test_free_communication_leaves_the_local_iteration(self):
        t = model.iteration_s(self.compute, [100, 300], lambda n: 0.0)
        self.assertAlmostEqual(t, 0.055)

    def test_buckets_wait_for_their_gradients_and_for_each_other(self):
        # bucket 0 (half the bytes) is ready at 10 + 20 ms, reduced by 60 ms;
        # bucket 1, ready at 50 ms, waits for it: 60 + 30 = 90 ms
        t = model.iteration_s(self.compute, [100, 100], lambda n: 0.030)
        self.assertAlmostEqual(t, 0.090 + 0.005)

    def test_communication_hidden_behind_the_backward(self):
        # each bucket's reduction ends before the next is ready; the last
        # one (ready at 50 ms) takes 1 ms
        t = model.iteration_s(self.compute, [100, 100, 100, 100], lambda n: 0.001)
        self.assertAlmostEqual(t, 0.050 + 0.001 + 0.005)


if __name__ == "__main__":
    unittest.main()
