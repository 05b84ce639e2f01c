#!/usr/bin/env bash
# Installs the dependencies (scripts/install-deps.sh) and builds (Release,
# -j2) against the tier's libtorch (scripts/env.sh: DDP_LIBTORCH=pip into
# build/, newest into build-newest/, debian into build-debian/). Used by
# scripts/test.sh and scripts/run.sh. Prints the build directory's name last.
#   DDP_BUILD_TARGETS  only these targets (words), e.g. "ddprun train" (what
#                      scripts/run.sh needs) or "unit_tests"; default: all;
#                      "none": configure only (scripts/test.sh -R does, then
#                      builds what the chosen tests run)
#   DDP_CMAKE_ARGS     more arguments for CMake (e.g. -DGTest_DIR=...)
#   DDP_BUILD_DIR      another build directory
#   DDP_BUILD_JOBS     parallel jobs (default 2)
# CMake configures again only when these arguments change (a build re-runs
# CMake by itself when a CMakeLists.txt changes).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
[ -n "${DDP_SKIP_INSTALL:-}" ] || scripts/install-deps.sh >&2
# libtorch's headers cost seconds a file even precompiled: ccache (paths
# relative to the checkout, so another clone of the same sources hits too)
# keeps rebuilds short.
export CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR="$PWD"
# The library's precompiled header (CMakeLists.txt): ccache caches its
# creation too, and takes a cached one as the same header in another build
# directory with these sloppinesses. Five tiers' builds fit in 20 GB.
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-20G}
command -v ccache >/dev/null || unset CMAKE_CXX_COMPILER_LAUNCHER
if [ "$DDP_LIBTORCH" = debian ]; then
  dir=${DDP_BUILD_DIR:-build-debian}
  torch_dir=/usr/lib/x86_64-linux-gnu/cmake/Torch
  # The benchmarks measure against pip's PyTorch: built and run on the
  # primary tier only.
  args=(-DDDP_REFERENCE_PYTHON=/usr/bin/python3 -DDDP_BUILD_BENCH=OFF)
else
  dir=${DDP_BUILD_DIR:-build}
  [ "$DDP_LIBTORCH" = pip ] || dir=${DDP_BUILD_DIR:-build-$DDP_LIBTORCH}
  # The torch package's own folder as the prefix: its lib/ then comes before
  # the system's, where Debian's libtorch also lies.
  # (Found without importing torch, which takes seconds.)
  prefix=$("$DDP_PYTHON" -c 'import importlib.util as u; print(u.find_spec("torch").submodule_search_locations[0])')
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
# shellcheck disable=SC2206  # DDP_CMAKE_ARGS: words
configure=(cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "${args[@]}" ${DDP_CMAKE_ARGS:-})
# (What a first configuration also reads from the environment counts too.)
stamp="${configure[*]} CC=${CC:-} CXX=${CXX:-} CXXFLAGS=${CXXFLAGS:-} LDFLAGS=${LDFLAGS:-}"
if [ ! -f "$dir/CMakeCache.txt" ] || [ "$(cat "$dir/configure.args" 2>/dev/null)" != "$stamp" ]; then
  rm -f "$dir/configure.args"
  "${configure[@]}" >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log" >&2; exit 1; }
  echo "$stamp" >"$dir/configure.args"
fi
targets=()
for t in ${DDP_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
[ "${DDP_BUILD_TARGETS:-}" = none ] ||
  cmake --build "$dir" -j"${DDP_BUILD_JOBS:-2}" "${targets[@]}" >&2
echo "$dir"
