#!/usr/bin/env bash
# ddp-torch installed as a user would: a fresh virtual environment that has
# torch and nothing of ddp's (the tier's torch, seen through a .pth file
# rather than downloaded again), `pip install --no-build-isolation ./python`
# from this checkout, then, from another folder, `import ddp_torch` and two
# ranks all-reducing over "ddp". The build goes to $1 (CMake's, reused by
# the next run; ccache keeps a rebuild short), which is hidden while the
# installed package runs, so that it cannot lean on it.
#   test_install.sh BUILD_DIR PYTHON
set -euo pipefail
build=$1 python=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=$(mktemp -d /tmp/ddp-torch-venv.XXXXXX)
trap 'rm -rf "$venv"' EXIT
/usr/bin/python3 -m venv "$venv"
site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' |
  { read -r own; echo "$site" >"$own/tier-torch.pth"; }
# As in scripts/build.sh: paths relative to the checkout, so that ccache
# hits across clones. No precompiled header: one made in this build folder
# differs from every other, so that each object compiled with it would miss
# ccache (a minute and a half each time); without it, a run after the suite's
# last one finds every object there.
export CCACHE_BASEDIR=$repo CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
DDP_TORCH_BUILD_DIR=$build DDP_BUILD_JOBS=2 DDP_TORCH_CMAKE_ARGS=-DDDP_PRECOMPILE_HEADERS=OFF \
  "$venv/bin/python" -m pip install -q --no-build-isolation --no-deps "$repo/python"
# The installed package must stand alone: the build folder out of sight.
mv "$build" "$build.hidden"
trap 'mv "$build.hidden" "$build"; rm -rf "$venv"' EXIT
cd "$venv"
DDP_TORCH_TESTS=$repo/python/tests "$venv/bin/python" - <<'PY'
import importlib.metadata, os, subprocess, sys
sys.path.append(os.environ["DDP_TORCH_TESTS"])  # launch.py's free_port, after the venv's own
from launch import free_port
import ddp_torch
where = os.path.dirname(ddp_torch.__file__)
assert where.startswith(sys.prefix), f"ddp_torch imported from {where}, not the venv"
print("ddp-torch", importlib.metadata.version("ddp-torch"), "from", where)
code = """
import torch, torch.distributed as dist, ddp_torch
dist.init_process_group("ddp")
t = torch.ones(4) * (dist.get_rank() + 1)
dist.all_reduce(t)
assert torch.equal(t, torch.full((4,), 3.0)), t
"""
env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2")
procs = [subprocess.Popen([sys.executable, "-c", code], env=dict(env, RANK=str(r))) for r in range(2)]
codes = [p.wait(timeout=120) for p in procs]
assert codes == [0, 0], codes
print("two ranks all-reduced over ddp from the installed package")
PY
