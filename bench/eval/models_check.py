"""`bench/evaluate.py models`: whether the C++ and Python definitions of a
benchmark model agree (bench/models/*.h and models.py), from their listings

    ddp_bench models --print NAME --seed S
    /usr/bin/python3 bench/models/models.py --print NAME --seed S

one line per parameter, "index name [shape] checksum", then "total ...".
The structure (names, shapes, order: all but the checksum) must be equal, or
no comparison of the two sides means anything; equal initial weights (the
per-parameter float64 sums as printed, %.9e) are reported, and required with
--same-weights. experiments/paper's `paper` runs the same check before its
runs.
"""

import os
import subprocess

from harness import REPO, Snapshot, die

MODELS = ("mlp", "resnet18", "resnet50", "bert_small", "bert_base")


def listing(cmd, env=None):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        lines = proc.stderr.strip().splitlines()
        return None, lines[-1] if lines else "exit status %d" % proc.returncode
    return [l for l in proc.stdout.splitlines() if l.strip()], None


def compare(bench, python, env, model, seed=0):
    """{same_structure, same_initial_weights, tensors, parameters, difference}:
    `difference` names the first line where the structures differ, or why
    there is nothing to compare."""
    cxx, err_c = listing([bench, "models", "--print", model, "--seed", str(seed)], env)
    py, err_p = listing([python, os.path.join(REPO, "bench", "models", "models.py"), "--print",
                         model, "--seed", str(seed)])
    result = {"same_structure": False, "same_initial_weights": False, "tensors": 0,
              "parameters": None, "difference": None}
    if err_c or err_p:
        result["difference"] = "ddp_bench models --print failed: %s" % err_c if err_c else \
            "models.py --print failed: %s" % err_p
        return result
    # A parameter line's structure is all but its checksum; "total" is all structure.
    structure = lambda l: l if l.startswith("total ") else l.rsplit(" ", 1)[0]  # noqa: E731
    for i in range(max(len(cxx), len(py))):
        a = structure(cxx[i]) if i < len(cxx) else "(nothing)"
        b = structure(py[i]) if i < len(py) else "(nothing)"
        if a != b:
            result["difference"] = 'line %d: C++ "%s" vs Python "%s"' % (i + 1, a, b)
            return result
    params = [(a, b) for a, b in zip(cxx, py) if not a.startswith("total ")]
    differ = [a.split()[:2] + [a.split()[-1], b.split()[-1]] for a, b in params
              if a.split()[-1] != b.split()[-1]]
    total = next((l.split() for l in cxx if l.startswith("total ")), None)
    result.update(same_structure=bool(params), same_initial_weights=bool(params) and not differ,
                  tensors=len(params), parameters=int(total[1]) if total else None)
    if differ:
        result["weights"] = "%d of %d checksums differ, first: %s %s (C++ %s, Python %s)" % (
            (len(differ), len(params)) + tuple(differ[0]))
    return result


def describe(result):
    """Why a structure check failed, in words."""
    diff = result["difference"] or "neither side listed a parameter"
    return ("names/shapes/order differ at " if diff.startswith("line ") else
            "cannot be compared: ") + diff


def add_parser(sub):
    p = sub.add_parser("models", help="the C++ and Python models: same parameters, same weights?",
                       description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                       formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help="any of %s (default all)" % ", ".join(MODELS))
    p.add_argument("--seed", type=int, default=0, help="the weights' seed on both sides")
    p.add_argument("--same-weights", action="store_true", help="also fail when weights differ")
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.set_defaults(run=run)


def run(args):
    models = [m for arg in args.models for m in arg.split(",")] or list(MODELS)
    status = 0
    with Snapshot(args.build) as snap:
        for m in models:
            r = compare(snap.bench, snap.python, snap.env, m, args.seed)
            if not r["same_structure"]:
                die("models: %s (seed %d): %s" % (m, args.seed, describe(r)))
            print("%s (seed %d): names, shapes and order equal: %d parameters in %d tensors; "
                  "initial weights %s" % (m, args.seed, r["parameters"] or 0, r["tensors"],
                                          "equal" if r["same_initial_weights"] else
                                          "differ: " + r["weights"]))
            if not r["same_initial_weights"] and args.same_weights:
                status = 1
    return status
