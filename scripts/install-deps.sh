#!/usr/bin/env bash
# Installs everything ddp needs: Debian 12's packages, then the pinned pip
# torch into the project's virtual environment (scripts/env.sh). Idempotent;
# prints nothing when all is already there. Run as root (or with sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh

packages=(
  build-essential cmake          # the build
  ccache                         # rebuilds (and CI's clean clones) reuse compiled files
  dataset-fashion-mnist          # the main job's data (examples/train)
  zlib1g-dev                     # examples/train unzips it
  libssl-dev                     # OpenSSL's libcrypto: the job secret's HMAC (rendezvous)
  clang                          # scripts/thread-safety.sh: the thread-safety annotations checked
  python3-venv                   # the virtual environment of pip's torch
  python3-dev                    # Python's headers: ddp_torch's extension module (python/)
  libgtest-dev                   # GoogleTest: the multirank test tier
  libtorch-dev                   # libtorch 1.13: the second tier (DDP_LIBTORCH=debian)
  libgloo-dev                    # Gloo headers: our collective backend
  libopenblas0-pthread           # fast BLAS for Debian's libtorch (else reference BLAS)
  python3-torch                  # PyTorch 1.13's DDP and torchrun: the second tier's reference
  python3-matplotlib             # plots in bench reports
  python3-numpy                  # the PyTorch reference scripts
  python3-sklearn                # the "digits" data set: experiments/paper/evaluate.py digits
  coreutils procps               # timeout, kill: bounded waits in the tests
  openmpi-bin libopenmpi-dev     # mpirun launch path
  slurm-wlm munge                # srun tests: a one-node Slurm cluster (tests/slurm)
  iproute2                       # ip netns / tc for multi-node tests and bench
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# pip's torch is a CUDA build: configuring against it runs CUDA's CMake checks,
# which need the CUDA toolkit's nvcc (no GPU). The project's machines have it.
if [ "$DDP_LIBTORCH" != debian ] && ! command -v nvcc >/dev/null; then
  echo "install-deps: no nvcc on PATH: building against pip's torch (a CUDA build) needs the" \
       "CUDA toolkit (CUDA 13; no GPU needed). Install it, or use Debian's libtorch 1.13:" \
       "DDP_LIBTORCH=debian scripts/test.sh" >&2
  exit 1
fi

# pip's torch (several GB with NVIDIA's wheels): once per machine; pip's
# cache keeps the download for a venv made again.
# (Its version from the package's metadata: importing torch takes seconds.)
installed=$("$DDP_PYTHON" -c 'import importlib.metadata as m; print(m.version("torch").split("+")[0])' 2>/dev/null || true)
if [ "$DDP_LIBTORCH" != debian ] && [ "$installed" != "$DDP_TORCH_VERSION" ]; then
  echo "install-deps: torch $DDP_TORCH_VERSION into $DDP_VENV" >&2
  [ -x "$DDP_VENV/bin/python" ] || /usr/bin/python3 -m venv "$DDP_VENV"
  "$DDP_VENV/bin/python" -m pip install -q "torch==$DDP_TORCH_VERSION" numpy >&2
fi
# wheel: pip builds ddp_torch (python/, `pip install --no-build-isolation`)
# with the venv's own setuptools, which needs it (python/tests/test_install.sh).
if [ "$DDP_LIBTORCH" != debian ] && ! "$DDP_VENV/bin/python" -c 'import wheel' 2>/dev/null; then
  "$DDP_VENV/bin/python" -m pip install -q wheel >&2
fi
