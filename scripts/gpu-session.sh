#!/usr/bin/env bash
# The GPU checks on a lent GPU machine (docs/benchmarks.md, "On a GPU"): a
# bare Ubuntu with pip's torch 2.11 in its python3, no Debian packages, no
# network. Two steps:
#   scripts/gpu-session.sh fetch   here: Debian's GoogleTest, Gloo and OpenSSL
#                                  (libcrypto: the job secret) packages
#                                  as .deb files into .gpu/ (git-ignored
#                                  through .git/info/exclude), to be carried,
#                                  with NCCL 2.30.7 for sm_90 (scripts/
#                                  build-nccl.sh, about 20 MB stripped)
#   scripts/gpu-session.sh run     there (with .gpu carried): builds the GPU
#                                  targets with its torch (-j16, Ninja), runs
#                                  the gpu tests, then bench/gpu/compare.sh;
#                                  logs and results under $OUT (or /tmp/gpu-out)
# With .gpu/nccl, `run` loads that NCCL in place of torch's 2.28 (LD_PRELOAD:
# a process loads one libnccl.so.2, the first found) with
# NCCL_MULTI_RANK_GPU_ENABLE=1, so that the nccl tests run at 2-4 ranks on
# the one GPU: first without NVIDIA's MPS daemon, then, where the image has
# nvidia-cuda-mps-control, the nccl tests again under MPS. The summary says
# which passed. NCCL_MAX_CTAS (default 2 here) limits NCCL's kernels, for
# ranks that time-slice the GPU.
# Environment for `run`: ROUNDS (compare.sh's rounds, default 1), BENCH_S
# (its time limit, default 200 s), SKIP_BENCH=1 (tests only), TESTS_S (the
# gpu tests' time limit, default 360 s).
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  fetch)
    grep -qx "/.gpu/" .git/info/exclude 2>/dev/null || echo "/.gpu/" >>.git/info/exclude
    mkdir -p .gpu
    (cd .gpu && apt-get download libgtest-dev libgloo-dev libgloo0 libssl-dev libssl3)
    nccl=$(scripts/build-nccl.sh --print) || { scripts/build-nccl.sh && nccl=$(scripts/build-nccl.sh --print); }
    # The library itself (no links: a carried tree may drop them), and its licence.
    rm -rf .gpu/nccl && mkdir -p .gpu/nccl/lib
    cp -L "$nccl/libnccl.so.2" .gpu/nccl/lib/ && cp "$(dirname "$nccl")/LICENSE.txt" .gpu/nccl/
    du -sh .gpu
    ;;
  run)
    out=${OUT:-/tmp/gpu-out}
    mkdir -p "$out" /tmp/gt /tmp/gloo
    dpkg -x .gpu/libgtest-dev_*.deb /tmp/gt
    for f in .gpu/libgloo*.deb; do dpkg -x "$f" /tmp/gloo; done
    # OpenSSL's headers where the machine lacks them: Debian's, with its
    # libcrypto.so.3 beside them (the build links that one by path).
    cxxflags="-isystem/tmp/gloo/usr/include"
    openssl=()
    if [ ! -f /usr/include/openssl/hmac.h ]; then
      mkdir -p /tmp/ssl
      for f in .gpu/libssl*.deb; do dpkg -x "$f" /tmp/ssl; done
      cxxflags+=" -isystem/tmp/ssl/usr/include/x86_64-linux-gnu"
      openssl=(-DOPENSSL_INCLUDE_DIR=/tmp/ssl/usr/include
        -DOPENSSL_CRYPTO_LIBRARY=/tmp/ssl/usr/lib/x86_64-linux-gnu/libcrypto.so)
    fi
    nvidia-smi -L
    python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())"
    prefix=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
    python=$(command -v python3)
    # Gloo's headers only (ddp_bench's c10d reference); the gloo backend
    # itself is not built there (no libgloo to link).
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
      -DDDP_REFERENCE_PYTHON="$python" -DCMAKE_CXX_FLAGS="$cxxflags" "${openssl[@]}" \
      -DGTest_DIR=/tmp/gt/usr/lib/x86_64-linux-gnu/cmake/GTest >"$out/configure.log" 2>&1 ||
      { tail -40 "$out/configure.log"; exit 1; }
    grep "ddp:" "$out/configure.log"
    timeout 420 cmake --build build -j16 --target ddprun gpu_probe nccl_probe cuda_collectives_test \
      ddp_equivalence comm_hooks_test sync_batchnorm_ddp fault_rank train ddp-flight ddp_bench \
      >"$out/build.log" 2>&1 || { grep -B2 -A8 "error" "$out/build.log" | head -80; exit 1; }
    if [ -f .gpu/nccl/lib/libnccl.so.2 ]; then
      export LD_PRELOAD=$PWD/.gpu/nccl/lib/libnccl.so.2 NCCL_MULTI_RANK_GPU_ENABLE=1
      # Ranks sharing the GPU without MPS time-slice it: fewer CTAs per
      # NCCL kernel leave room for the other ranks' kernels.
      export NCCL_MAX_CTAS=${NCCL_MAX_CTAS:-2}
      echo "NCCL preloaded; NCCL_MAX_CTAS=$NCCL_MAX_CTAS"
    fi
    build/tests/gpu/nccl_probe 4 | tee "$out/nccl-probe.log"
    timeout "${TESTS_S:-360}" ctest --test-dir build -L gpu --timeout 150 --output-on-failure \
      >"$out/gpu-tests.log" 2>&1
    echo "ctest exit $?"
    grep -E "Test +#|tests passed|FAILED" "$out/gpu-tests.log" | head -40
    if command -v nvidia-cuda-mps-control >/dev/null && [ -n "${LD_PRELOAD:-}" ]; then
      export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
      mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
      nvidia-cuda-mps-control -d && echo "MPS started"
      timeout 240 ctest --test-dir build -L gpu -R nccl --timeout 120 --output-on-failure \
        >"$out/gpu-tests-mps.log" 2>&1
      echo "ctest under MPS exit $?"
      grep -E "Test +#|tests passed|FAILED" "$out/gpu-tests-mps.log" | head -20
      echo quit | nvidia-cuda-mps-control
    else
      echo "no MPS run (no nvidia-cuda-mps-control, or no NCCL 2.30 carried)"
    fi
    [ -n "${SKIP_BENCH:-}" ] && exit 0
    DDP_PYTHON=$python timeout "${BENCH_S:-200}" bench/gpu/compare.sh build "$out/bench" \
      "${ROUNDS:-1}" >"$out/bench.log" 2>&1
    echo "bench exit $?"
    tail -8 "$out/bench.log"
    # The results as one archive: a lent machine may bring back only a few files.
    tar -C "$out" -czf "$out/bench.tgz" bench && rm -rf "$out/bench"
    ;;
  *)
    echo "usage: scripts/gpu-session.sh fetch|run" >&2
    exit 2
    ;;
esac
