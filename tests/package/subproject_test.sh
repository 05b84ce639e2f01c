#!/usr/bin/env bash
# ddp built inside a user's project, both ways (subproject/CMakeLists.txt):
# add_subdirectory, then FetchContent. Each builds, defines none of ddp's
# tests, and its program runs on 2 ranks with the ddprun it built.
#   subproject_test.sh BUILD_DIR SOURCE_DIR TORCH_PREFIX
# ddp's build inside the two projects goes to one folder beside BUILD_DIR
# (BUILD_DIR-subproject, removed at the end): the second way reuses the
# first's objects, and ccache (paths relative to the checkout) those of the
# last run: without a precompiled header, whose every build differs, so that
# objects compiled with it would always miss.
set -euo pipefail
build=$(realpath "$1") src=$(realpath "$2") torch_prefix=$3
tmp=$(mktemp -d)
ddp_binary=$build-subproject
trap 'rm -rf "$tmp" "$ddp_binary"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=$src CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
for way in subdirectory fetchcontent; do
  cmake -S "$src/tests/package/subproject" -B "$tmp/$way" -DCMAKE_BUILD_TYPE=Release \
        "${launcher[@]}" -DCMAKE_PREFIX_PATH="$torch_prefix" -DDDP_CONSUME=$way \
        -DDDP_PRECOMPILE_HEADERS=OFF \
        -DDDP_SOURCE="$src" -DDDP_BINARY="$ddp_binary" -DFETCHCONTENT_SOURCE_DIR_DDP="$src" \
        >"$tmp/$way.configure.log" 2>&1 || { cat "$tmp/$way.configure.log"; fail "$way: configure"; }
  cmake --build "$tmp/$way" -j"${DDP_BUILD_JOBS:-2}" >"$tmp/$way.build.log" 2>&1 || {
    tail -n 40 "$tmp/$way.build.log"; fail "$way: build"; }
  timeout -s KILL 120 "$ddp_binary/tools/ddprun/ddprun" --nproc-per-node 2 "$tmp/$way/consumer" ||
    fail "$way: the program failed"
  echo "ok: $way"
done
