#!/usr/bin/env bash
# Checks the thread-safety annotations (src/base/thread_annotations.h):
# builds the library, the Gloo module and (against pip's torch) ddp_torch's
# extension module (python/) with clang, -Wthread-safety -Werror, into
# build-clang/. Exit status 0: every guarded member is read and written
# with its mutex held, every DDP_REQUIRES function called with it. CI runs it.
# Without the precompiled header, so that it also checks that every file
# includes what it uses.
#
#   scripts/thread-safety.sh         against pip's torch (DDP_LIBTORCH=debian: 1.13)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang++ >/dev/null || { echo "thread-safety: clang++ not found (apt-get install clang)" >&2; exit 1; }
targets="ddp ddp_gloo"
[ "${DDP_LIBTORCH:-pip}" = debian ] || targets="$targets ddp_torch_C"  # torch 2.6 or later
export CC=clang CXX=clang++ DDP_BUILD_DIR=build-clang DDP_BUILD_TARGETS="$targets"
export DDP_CMAKE_ARGS="-DDDP_THREAD_SAFETY_ANALYSIS=ON -DDDP_PRECOMPILE_HEADERS=OFF -DDDP_BUILD_TESTS=OFF -DDDP_BUILD_BENCH=OFF -DDDP_BUILD_EXAMPLES=OFF ${DDP_CMAKE_ARGS:-}"
scripts/build.sh >/dev/null
echo "thread-safety: clean (clang -Wthread-safety -Werror, build-clang/)"
