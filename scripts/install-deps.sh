#!/usr/bin/env bash
# Installs everything ddp needs from Debian 12's packages. Idempotent; prints
# nothing when all is already there. Run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential cmake          # the build
  ccache                         # rebuilds (and CI's clean clones) reuse compiled files
  libgtest-dev                   # GoogleTest: the multirank test tier
  libtorch-dev                   # libtorch 1.13: tensors, autograd, c10d stores
  libgloo-dev                    # Gloo headers: our collective backend
  libopenblas0-pthread           # fast BLAS for libtorch (else reference BLAS)
  python3-torch                  # PyTorch's own DDP: the reference in tests/bench
  python3-matplotlib             # plots in bench reports
  python3-numpy                  # the PyTorch reference scripts
  python3-sklearn                # the "digits" data set: bench/evaluate.py digits (converge)
  coreutils procps               # timeout, kill: bounded waits in the tests
  openmpi-bin libopenmpi-dev     # mpirun launch path
  iproute2                       # ip netns / tc for multi-node tests and bench
  debootstrap                    # the libtorch 2.x tier's Debian 13 chroot (test-libtorch2.sh)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
