#!/usr/bin/python3
"""The α–β model's arithmetic (scale_model.py), on numbers worked by hand.
CTest runs it as bench_scale_model."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import scale  # noqa: E402
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


class Tables(unittest.TestCase):
    """scale.py's tables on a run whose every measurement is what the model
    predicts (DDP's own cost: 10 ms at one node)."""

    link = model.Link(50e-6, 8e-9, "x")
    host = {n: n / 4e9 for n in (64 << 10, 1 * MB, 16 * MB, 64 * MB)}  # 4 GB/s
    compute = {"forward": 20.0, "backward": 40.0, "step": 10.0}
    buckets = [1 * MB, 25 * MB, 25 * MB, 13 * MB]

    def training_run(self, layout, nodes, per_node):
        r = {"rate": "none" if nodes == 1 else "1g", "layout": layout, "nodes": nodes,
             "ranks_per_node": per_node, "compute_ms": self.compute,
             "bucket_bytes": self.buckets, "local_ms": 70.0}
        host = lambda n: model.interpolate(self.host, n)  # noqa: E731
        own = 10.0 * max(1.0, nodes * per_node / 2.0)
        r["ddp_ms"] = scale.predict(r, self.link, host) + own
        return r

    def doc(self):
        sizes = [4096, 1 * MB, 16 * MB, 64 * MB]
        checks = [{"bytes": n, "median_us": model.ring(n, 4, self.link) * 1e6, "rate": "1g",
                   "nodes": 4} for n in sizes[1:]]
        return {"model": "mlp", "iters": 1, "cores": 2,
                "links": {"1g": collective_rows(50e-6, 8e-9, 2, sizes)},
                "host_allreduce": [{"bytes": n, "median_us": t * 1e6} for n, t in self.host.items()],
                "collectives": checks,
                "train": [self.training_run("hierarchical", 1, 2), self.training_run("ring", 2, 1),
                          self.training_run("hierarchical", 2, 2), self.training_run("ring", 4, 1)]}

    def test_exact_measurements_have_no_error(self):
        md = scale.tables(self.doc())
        collective_rows_md = [l for l in md.splitlines() if l.startswith("| 1g | 4 |")]
        self.assertEqual(len(collective_rows_md), 3)
        self.assertTrue(all(l.endswith("| +0.0 % |") or l.endswith("| -0.0 % |")
                            for l in collective_rows_md), collective_rows_md)
        train = [l for l in md.splitlines() if l.startswith("| 1g | ring |") or
                 l.startswith("| 1g | hierarchical |")]
        self.assertEqual(len(train), 3)
        self.assertTrue(all(l.rstrip(" |").endswith("0.0 %") for l in train), train)
        self.assertIn("(measures it)", md)

    def test_projection_tree_stays_flat_where_the_ring_grows(self):
        doc = self.doc()
        links, host = scale.fits(doc)
        proj, base, rate = scale.projection(doc, links, host)
        self.assertEqual((base["nodes"], rate), (1, "1g"))
        ring, tree = dict(proj[(100, "ring")]), dict(proj[(100, "hierarchical-tree")])
        self.assertGreater(ring[256], 2 * ring[8])
        self.assertLess(tree[256], 1.1 * tree[8])

    def test_rates(self):
        self.assertEqual([scale.gbit_s(r) for r in ("1g", "10gbit", "500m", "2.5g")],
                         [1.0, 10.0, 0.5, 2.5])


if __name__ == "__main__":
    unittest.main()
