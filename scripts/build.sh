#!/usr/bin/env bash
# Installs the dependencies (scripts/install-deps.sh) and builds everything
# into build/ (Release, -j2). Used by scripts/test.sh and scripts/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# libtorch's headers cost ~15 s a file: ccache (paths relative to the
# checkout, so another clone of the same sources hits too) keeps rebuilds short.
export CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR="$PWD"
mkdir -p build
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >build/configure.log 2>&1 || {
  cat build/configure.log; exit 1; }
cmake --build build -j2
