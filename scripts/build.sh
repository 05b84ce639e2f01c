#!/usr/bin/env bash
# Installs the dependencies (scripts/install-deps.sh) and builds everything
# (Release, -j2): against pip's torch into build/, or with
# DDP_LIBTORCH=debian against Debian's libtorch 1.13 into build-debian/.
# Used by scripts/test.sh and scripts/run.sh. Prints the build directory's
# name last. DDP_CMAKE_ARGS: more arguments for CMake (e.g. -DGTest_DIR=...);
# DDP_BUILD_DIR: another build directory; DDP_BUILD_TARGETS: only these targets.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
[ -n "${DDP_SKIP_INSTALL:-}" ] || scripts/install-deps.sh >&2
# libtorch's headers cost ~15 s a file: ccache (paths relative to the
# checkout, so another clone of the same sources hits too) keeps rebuilds short.
export CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR="$PWD"
command -v ccache >/dev/null || unset CMAKE_CXX_COMPILER_LAUNCHER
if [ "$DDP_LIBTORCH" = debian ]; then
  dir=${DDP_BUILD_DIR:-build-debian}
  torch_dir=/usr/lib/x86_64-linux-gnu/cmake/Torch
  # The benchmarks measure against pip's PyTorch: built and run on the
  # primary tier only.
  args=(-DDDP_REFERENCE_PYTHON=/usr/bin/python3 -DDDP_BUILD_BENCH=OFF)
else
  dir=${DDP_BUILD_DIR:-build}
  # The torch package's own folder as the prefix: its lib/ then comes before
  # the system's, where Debian's libtorch also lies.
  prefix=$("$DDP_PYTHON" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  torch_dir=$prefix/share/cmake/Torch
  args=(-DCMAKE_PREFIX_PATH="$prefix" -DDDP_REFERENCE_PYTHON="$DDP_PYTHON")
fi
# A build directory configured against another libtorch (an older build.sh,
# another DDP_PYTHON) keeps it in its cache: start its configuration afresh.
if [ -f "$dir/CMakeCache.txt" ] && ! grep -qx "Torch_DIR:PATH=$torch_dir" "$dir/CMakeCache.txt"; then
  echo "build: $dir was configured against another libtorch; configuring it again" >&2
  rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
fi
mkdir -p "$dir"
# shellcheck disable=SC2086  # DDP_CMAKE_ARGS: words
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "${args[@]}" ${DDP_CMAKE_ARGS:-} >"$dir/configure.log" 2>&1 || {
  cat "$dir/configure.log" >&2; exit 1; }
targets=()
for t in ${DDP_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$dir" -j"${DDP_BUILD_JOBS:-2}" "${targets[@]}" >&2
echo "$dir"
