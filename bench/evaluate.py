#!/usr/bin/python3
"""The benchmark pipeline: one subcommand per kind of table or plot.

Every table and plot of docs/benchmarks.md comes from one of these
subcommands (bench/README.md says what each runs and which program it uses):

  train         `ddp_bench train` against PyTorch's DDP, alternated run by run;
                --backend mpi|shm|gloo|auto picks ours (eval/compare.py)
  hooks         communication hooks, ours against PyTorch's (eval/compare.py)
  hierarchical  2 nodes x 2 ranks on a shaped link: hierarchical, flat Gloo,
                PyTorch's DDP (eval/compare.py)
  collectives   allreduce by backend against c10d and raw MPI, with the bus
                bandwidth plot (eval/collectives.py)
  models        the C++ and Python benchmark models: same parameters and weights?
                (eval/models_check.py)

(The paper's §5 experiments and the blog's variants: experiments/paper/evaluate.py.)

Every subcommand snapshots ddp_bench, libddp and ddprun from --build first
(a rebuild meanwhile cannot change the code under test), bounds each run by
a time limit, and alternates the sides round by round (eval/harness.py).
`--quick` runs each one tiny, into $TMPDIR/ddp-bench-quick/, to check that
the pipeline works; its numbers mean nothing.

    bench/evaluate.py train --link 1g
    bench/evaluate.py hooks --quick
    bench/evaluate.py SUBCOMMAND --help
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "eval"))

import collectives  # noqa: E402
import compare  # noqa: E402
import models_check  # noqa: E402


def main():
    p = argparse.ArgumentParser(prog="bench/evaluate.py", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    sub = p.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
    compare.add_parsers(sub)
    collectives.add_parser(sub)
    models_check.add_parser(sub)
    args = p.parse_args()
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
