# Sourced by the scripts: the libtorch ddp is built against and the Python
# that is PyTorch's reference, in one place.
#
# DDP_LIBTORCH chooses the tier (default pip):
#   pip     pip's torch 2.11.0, pinned (CUDA 13.0, NCCL 2.28, C++17): the
#           primary tier, into build/
#   newest  the newest torch on PyPI, pinned when it was checked: 2.15.0 (CUDA
#           13.2, NCCL 2.30.7; C++20 from 2.13 on), into build-newest/
#   debian  Debian 12's libtorch 1.13 (libtorch-dev, CPU only), with Debian's
#           python3-torch as its reference, into build-debian/
# pip's torch (a CUDA build, with NVIDIA's runtime wheels and NCCL) lives in a
# virtual environment the project owns, outside the checkout (so that CI's
# fresh clones reuse it), one per version:
#   DDP_TORCH_VERSION  the tier's torch
#   DDP_VENV           its virtual environment (made by install-deps.sh)
#   DDP_PYTHON         its interpreter: the build finds libtorch through it,
#                      and it runs PyTorch's own DDP in the reference tests
#                      and benchmarks. Point it at another Python with that
#                      torch (e.g. on a GPU machine) to build against its.
DDP_LIBTORCH=${DDP_LIBTORCH:-pip}
case $DDP_LIBTORCH in
  pip) DDP_TORCH_VERSION=2.11.0 ;;
  newest) DDP_TORCH_VERSION=2.15.0 ;;
  debian) DDP_TORCH_VERSION=1.13 ;;
  *) echo "DDP_LIBTORCH=$DDP_LIBTORCH: one of pip, newest, debian" >&2; return 1 2>/dev/null || exit 1 ;;
esac
DDP_VENV=${DDP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddp/venv-torch-$DDP_TORCH_VERSION}
DDP_PYTHON=${DDP_PYTHON:-$DDP_VENV/bin/python}

# The CUDA toolkit's nvcc (configuring against pip's CUDA torch needs it),
# where a login shell's profile would have put it on PATH.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
