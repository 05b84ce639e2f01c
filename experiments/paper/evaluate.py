#!/usr/bin/python3
"""The paper's reproduction: its §5 experiments and the blog's six variants,
ours against PyTorch's DDP, on bench/'s harness (bench/eval/harness.py).

  paper         run the experiments, then the report (eval/paper.py)
  report        the report of a `paper` results directory again (eval/report.py)
  timeline      one run's timeline: the blog's columns, a Chrome trace (eval/timeline.py)
  digits        scikit-learn's digits as CSV for `paper_bench converge`

experiments/paper/README.md says what each experiment reproduces;
docs/experiments/paper-evaluation.md holds the last report.

    experiments/paper/evaluate.py paper --preset quick
    experiments/paper/evaluate.py paper --quick
    experiments/paper/evaluate.py SUBCOMMAND --help
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "eval"))  # harness, models_check
sys.path.insert(0, os.path.join(HERE, "eval"))

import harness  # noqa: E402
import paper  # noqa: E402
import timeline  # noqa: E402


def run_digits(args):
    error = paper.write_digits_csv(args.csv)
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
    p = argparse.ArgumentParser(prog="experiments/paper/evaluate.py",
                                description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    sub = p.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
    paper.add_parser(sub)
    r = sub.add_parser("report", help="the report of a `paper` results directory, again")
    r.add_argument("dir", help="what `paper` wrote, its runs/ included (the tree keeps none: "
                   "experiments/paper/README.md)")
    r.add_argument("--docs", default="", help="also replace the evaluation section of this "
                   "markdown file (docs/experiments/paper-evaluation.md) and copy the images "
                   "to docs/img/eval")
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
