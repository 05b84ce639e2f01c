#!/usr/bin/python3
"""The benchmark pipeline: one subcommand per kind of table or plot.

Every table and plot of docs/benchmarks.md comes from one of these
subcommands (bench/README.md says what each runs and which program it uses):

  paper         the paper's §5 experiments and the blog's six variants, ours
                against PyTorch's DDP, with the report (eval/paper.py)
  train         `ddp_bench train` against PyTorch's DDP, alternated run by run;
                --backend mpi|shm|gloo|auto picks ours (eval/compare.py)
  hooks         communication hooks, ours against PyTorch's (eval/compare.py)
  hierarchical  2 nodes x 2 ranks on a shaped link: hierarchical, flat Gloo,
                PyTorch's DDP (eval/compare.py)
  collectives   allreduce by backend against c10d and raw MPI, with the bus
                bandwidth plot (eval/collectives.py)
  compression   adaptive-precision compression against fp32, fp16 and PowerSGD
                on the main job: accuracy, bytes, time (eval/compression.py)
  scale         the α–β model of scale: checked against namespace runs at 1..4
                nodes, projected to 256 nodes at 10 and 100 Gbit/s (eval/scale.py)
  autotune      bucket_cap_mb "auto" against the sweep of 1..100 MiB, per model
                and link (eval/autotune.py)
  zero          ZeroRedundancyOptimizer against unsharded Adam, ours and
                PyTorch's: state memory and iteration time (eval/zero.py)
  report        the report of a `paper` results directory again (eval/report.py)
  timeline      one run's timeline: the blog's columns, a Chrome trace (eval/timeline.py)
  models        the C++ and Python benchmark models: same parameters and weights?
                (eval/models_check.py)
  digits        scikit-learn's digits as CSV for `ddp_bench converge`

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

import autotune  # noqa: E402
import collectives  # noqa: E402
import compression  # noqa: E402
import compare  # noqa: E402
import harness  # noqa: E402
import models_check  # noqa: E402
import paper  # noqa: E402
import scale  # noqa: E402
import timeline  # noqa: E402
import zero  # noqa: E402


def run_digits(args):
    error = harness.write_digits_csv(args.csv)
    if error:
        harness.die("digits: " + error)
    print("evaluate: wrote %s (1797 rows: 64 pixels 0..16, then the label)" % args.csv,
          file=sys.stderr)
    return 0


def run_report(args):
    return paper.report(args.dir, args.docs)


def main():
    if sys.argv[1:2] == ["timeline"]:
        return timeline.main(sys.argv[2:]) or 0
    p = argparse.ArgumentParser(prog="bench/evaluate.py", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    sub = p.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
    paper.add_parser(sub)
    compare.add_parsers(sub)
    collectives.add_parser(sub)
    compression.add_parser(sub)
    models_check.add_parser(sub)
    scale.add_parser(sub)
    autotune.add_parser(sub)
    zero.add_parser(sub)
    r = sub.add_parser("report", help="the report of a `paper` results directory, again")
    r.add_argument("dir", help="what `paper` wrote, its runs/ included (the tree keeps none: "
                   "bench/README.md)")
    r.add_argument("--docs", default="", help="also replace the evaluation section of this "
                   "markdown file (docs/benchmarks.md) and copy the images beside it")
    r.set_defaults(run=run_report)
    # Listed here; main() hands its arguments to eval/timeline.py, --help included.
    sub.add_parser("timeline", help="one run's timeline: the blog's columns, one iteration as "
                   "a Chrome trace")
    d = sub.add_parser("digits", help="scikit-learn's digits as CSV (needs python3-sklearn)")
    d.add_argument("csv", help="where to write it, e.g. /tmp/digits.csv")
    d.set_defaults(run=run_digits)
    args = p.parse_args()
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
