# Sourced by the scripts: the libtorch ddp is built against and the Python
# that is PyTorch's reference, in one place.
#
# The primary libtorch is pip's torch (a CUDA 13 build, with NVIDIA's runtime
# wheels and NCCL), pinned, in a virtual environment the project owns
# outside the checkout (so that CI's fresh clones reuse it):
#   DDP_TORCH_VERSION  the pinned torch (2.11.0: CUDA 13.0, NCCL 2.28, C++17;
#                      2.13 and later need C++20)
#   DDP_VENV           the virtual environment (made by install-deps.sh)
#   DDP_PYTHON         its interpreter: the build finds libtorch through it,
#                      and it runs PyTorch's own DDP in the reference tests
#                      and benchmarks. Point it at another Python with that
#                      torch (e.g. on a GPU machine) to build against its.
# The second tier is Debian 12's libtorch 1.13 (libtorch-dev), with Debian's
# python3-torch as its reference: DDP_LIBTORCH=debian.
DDP_TORCH_VERSION=2.11.0
DDP_VENV=${DDP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddp/venv-torch-$DDP_TORCH_VERSION}
DDP_PYTHON=${DDP_PYTHON:-$DDP_VENV/bin/python}
DDP_LIBTORCH=${DDP_LIBTORCH:-pip}

# The CUDA toolkit's nvcc (configuring against pip's CUDA torch needs it),
# where a login shell's profile would have put it on PATH.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
