"""What every bench/evaluate.py subcommand shares: the snapshot of the code
under test, launching ranks (ddprun, bench/netem, mpirun) with a time limit,
the order in which the sides alternate, paired ratios, markdown tables.

Method (docs/benchmarks.md): the sides of a comparison run once each per
round and the order rotates round by round, so neither always goes first; a
ratio "by round" is the median over rounds of that round's ratio, which
cancels the slow drift of a shared machine that a ratio of pooled medians
keeps.
"""

import functools
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Debian's Python: matplotlib (the plots), and PyTorch 1.13 for build-debian/.
PLOT_PYTHON = "/usr/bin/python3"
# glibc's mmap threshold adapts to a process's history of frees and settles
# differently in the Python process than in ours: on ResNet-18 the Python
# ranks took 3x the page faults (897K against 300K for the same iterations),
# about 25 ms per iteration that have nothing to do with DDP. Fixed
# thresholds give both sides the same allocator behaviour.
FIXED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "1073741824"}
FIXED_MALLOC_NOTE = "both sides with " + " ".join("%s=%s" % kv for kv in FIXED_MALLOC.items())


def die(text):
    sys.exit("evaluate: " + text)


def quick_out(subcommand):
    """Where --quick writes unless --out says otherwise: never over the
    committed results in bench/results."""
    return os.path.join(os.environ.get("TMPDIR", "/tmp"), "ddp-bench-quick", subcommand)


def run_arguments(p, name, timeout, quick):
    """--timeout, --out, --build and --quick (`quick`: what it runs), as every
    subcommand that runs benchmarks takes them."""
    p.add_argument("--timeout", type=int, default=timeout,
                   help="seconds per run before it counts as hung (default %(default)s)")
    p.add_argument("--out", help="results directory (default bench/results; with --quick %s)"
                   % quick_out(name))
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--quick", action="store_true",
                   help=quick + ": checks the pipeline, not the numbers")


def results_dir(args, subcommand):
    """args.out, else (with --quick) quick_out(subcommand), else
    bench/results: made if missing, and set as args.out."""
    args.out = args.out or (quick_out(subcommand) if args.quick else
                            os.path.join(REPO, "bench", "results"))
    os.makedirs(args.out, exist_ok=True)
    return args.out


def built_program(build, path, target):
    """`path` under `build`, which must be an executable; else says which
    target to build, and exits."""
    program = os.path.join(build, path)
    if not os.access(program, os.X_OK):
        die("%s not found: cmake --build %s --target %s" % (program, build, target))
    return program


def reference_python(build):
    """The Python whose PyTorch is the reference for the ddp of `build`: the
    one its CMake cache names (DDP_REFERENCE_PYTHON: the project's venv with
    pip's PyTorch 2.x for build/, Debian's 1.13 for build-debian/), unless
    the environment's DDP_REFERENCE_PYTHON says otherwise. Both sides of a
    comparison then run the same libtorch."""
    if os.environ.get("DDP_REFERENCE_PYTHON"):
        return os.environ["DDP_REFERENCE_PYTHON"]
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("DDP_REFERENCE_PYTHON:"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return PLOT_PYTHON


def require_python(python, modules="torch.distributed"):
    if subprocess.run([python, "-c", "import " + modules], capture_output=True).returncode:
        die("%s cannot import %s: run scripts/install-deps.sh (the venv's torch, "
            "python3-torch, python3-matplotlib)" % (python, modules))


def torch_version(python):
    """`torch.__version__` of `python`, or "unknown"."""
    proc = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


def git_description():
    """The commit under test, and whether src/, include/, bench/ or
    experiments/ differ from it."""
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip() or "?"
    dirty = subprocess.run(["git", "-C", REPO, "status", "--short", "--", "src", "include",
                            "bench", ":!bench/results", "experiments"],
                           capture_output=True, text=True).stdout
    return head + ("+uncommitted" if dirty.strip() else "")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Snapshot:
    """A copy of ddp_bench, ddprun and libddp in a temporary directory, with
    the environment that runs it: a rebuild of build/ while the rounds run
    (other work in the same tree) must not change the code under test
    halfway. LD_LIBRARY_PATH comes before the binary's RUNPATH. `extra`:
    more programs to copy, as (path under build, target) pairs (e.g.
    experiments/paper's paper_bench), at self.dir/target."""

    def __init__(self, build, malloc="fixed", extra=()):
        self.dir = tempfile.mkdtemp(prefix="evaluate.")
        bench = os.path.join(build, "bench", "ddp_bench")
        ddprun = os.path.join(build, "tools", "ddprun", "ddprun")
        programs = [(bench, "ddp_bench"), (ddprun, "ddprun")] + \
            [(os.path.join(build, path), target) for path, target in extra]
        for path, target in programs:
            if not os.access(path, os.X_OK):
                self.close()
                die("%s not found: build first (scripts/build.sh, or cmake --build %s --target %s)"
                    % (path, build, target))
            shutil.copy2(path, os.path.join(self.dir, target))
        ldd = subprocess.run(["ldd", bench], capture_output=True, text=True).stdout
        for line in ldd.splitlines():
            parts = line.split()
            if parts and parts[0].startswith("libddp") and len(parts) > 2:
                shutil.copy2(parts[2], os.path.join(self.dir, parts[0]))
                # libddp loads its Gloo engine from beside itself (cmake/gloo_module.cmake).
                module = os.path.join(os.path.dirname(parts[2]), "libddp_gloo.so")
                if os.path.exists(module):
                    shutil.copy2(module, self.dir)
        self.bench = os.path.join(self.dir, "ddp_bench")
        self.python = reference_python(build)  # PyTorch's side
        self.ddprun = os.path.join(self.dir, "ddprun")
        self.built = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.path.getmtime(bench)))
        self.env = dict(os.environ)
        self.env["LD_LIBRARY_PATH"] = self.dir + (":" + self.env["LD_LIBRARY_PATH"]
                                                  if self.env.get("LD_LIBRARY_PATH") else "")
        # PyTorch >= 2.4 starts TCPStore on libuv by default; Debian 13's 2.6
        # has no libuv and refuses. The classic server is in every version
        # (1.13 ignores the variable), as in tests/reference/pytorch_ddp.py.
        self.env.setdefault("USE_LIBUV", "0")
        if malloc == "fixed":
            self.env.update(FIXED_MALLOC)
        self.malloc_note = FIXED_MALLOC_NOTE if malloc == "fixed" else \
            "glibc's default malloc thresholds"

    @functools.cached_property
    def reference(self):
        """"PyTorch's side: torch X", for the results that compare with it
        (asked once: importing torch takes seconds, which the subcommands
        that have no PyTorch side should not pay)."""
        return "PyTorch's side: torch %s" % torch_version(self.python)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- launchers: the command prefix that starts the ranks ---------------------
    def ddprun_cmd(self, nproc):
        return [self.ddprun, "--nproc-per-node", str(nproc), "--"]

    def netem_cmd(self, rate, nodes=2, nproc_per_node=1, bridge=False, mpirun=False):
        """`nodes` network namespaces joined by links shaped to `rate`
        (bench/netem; loopback, with a note, where it cannot build them);
        `mpirun`: one mpirun across them instead of a ddprun per node."""
        return [os.path.join(REPO, "bench", "netem"), "--rate", rate, "--nodes", str(nodes),
                "--nproc-per-node", str(nproc_per_node), "--ddprun", self.ddprun] + \
            (["--mpirun", "mpirun"] if mpirun else []) + (["--bridge"] if bridge else []) + ["--"]

    def mpirun_cmd(self, np, env, extra=()):
        """mpirun on this host; `env` (name -> value) is exported to the ranks
        with -x, as are the allocator settings and the snapshot's library path."""
        cmd = ["mpirun", "-np", str(np), "--allow-run-as-root", "--oversubscribe"] + list(extra)
        names = list(env) + [k for k in FIXED_MALLOC if k in self.env] + ["LD_LIBRARY_PATH"]
        for name in names:
            cmd += ["-x", "%s=%s" % (name, env.get(name, self.env.get(name, "")))]
        return cmd

    def launcher(self, link, world, bridge=False):
        """`world` ranks on loopback (ddprun), or one per namespace on a shaped
        link (`bridge`: joined by a bridge even when 2, as for more)."""
        if link == "loopback" or world == 1:
            return self.ddprun_cmd(world)
        return self.netem_cmd(link, nodes=world, bridge=bridge)


def run_bounded(cmd, env, timeout_s):
    """Runs cmd in its own process group; past timeout_s the whole group gets
    SIGTERM (bench/netem, ddprun and mpirun clean up on it), then SIGKILL.
    Returns (status, stdout and stderr); a hung run's status is 124, as
    timeout(1)'s."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        # bench/netem's teardown after SIGTERM takes up to ~13 s (namespaces).
        out = ""
        for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                out, _ = proc.communicate(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                out = ""
        return 124, (out or "") + "\nevaluate: no result after %d s: stopped (hung?)" % timeout_s


class Log:
    """Progress on stderr and, with the runs' output minus ranks 1.., in a
    log file (the `.txt` beside a comparison's tables)."""

    def __init__(self, path, append=False):
        self.path = path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        open(path, "a" if append else "w").close()

    def say(self, text):
        line = "evaluate: " + text
        print(line, file=sys.stderr, flush=True)
        self.write(line)

    def write(self, text):
        with open(self.path, "a") as f:
            f.write(text.rstrip("\n") + "\n")

    def output(self, text):
        """A run's output: rank 0 and the launchers, not the other ranks."""
        self.write("\n".join(l for l in text.strip().splitlines()
                             if not l.startswith("[rank ") or l.startswith("[rank 0]"))[-20000:])

    def load(self):
        return open("/proc/loadavg").read().split()[0]


def side_order(sides, shift):
    """The sides of round `shift` (0-based): rotated by one each round."""
    k = shift % len(sides)
    return list(sides[k:]) + list(sides[:k])


def alternated(configs, rounds, sides):
    """(config, round, side) in the order to run them: per configuration,
    rounds 1..`rounds`, each running every side once, rotated round by round."""
    for config in configs:
        for r in range(1, rounds + 1):
            for side in side_order(sides, r - 1):
                yield config, r, side


# --- statistics and tables --------------------------------------------------------

def finite(values):
    return [float(x) for x in values if isinstance(x, (int, float)) and math.isfinite(x)]


def median(values):
    v = finite(values)
    return statistics.median(v) if v else None


def paired_ratio(a_by_round, b_by_round):
    """The median over rounds of a[round] / b[round] (rounds both sides ran)."""
    ratios = [a_by_round[r] / b_by_round[r] for r in a_by_round
              if r in b_by_round and b_by_round[r]]
    return (statistics.median(ratios) if ratios else None), ratios


def esc(text):
    return str(text).replace("|", "\\|").replace("\n", " / ")


def md_table(headers, rows, right=None):
    """A markdown table; numbers to the right: columns whose cells all start like one."""
    if right is None:
        numeric = lambda c: str(c)[:1] in set("0123456789-+–.")  # noqa: E731
        right = [bool(rows) and all(numeric(r[i]) for r in rows) for i in range(len(headers))]
    out = ["| " + " | ".join(headers) + " |",
           "|" + "|".join("---:" if r else "---" for r in right) + "|"]
    out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def write_json(path, doc, compact_lists=False):
    text = json.dumps(doc, indent=1, default=str)
    if compact_lists:  # sample lists on one line: readable and a third of the size
        import re
        text = re.sub(r"\[\s*([-0-9.e+, \n]*?)\s*\]",
                      lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]",
                      text)
    with open(path, "w") as f:
        f.write(text + "\n")
