#!/usr/bin/env bash
# The exported CMake package: installs the build to a temporary prefix, builds
# a consumer project with find_package(ddp) against it (and only it, plus the
# libtorch the build used), and runs it on 2 ranks with the installed ddprun.
# Fails if the installed package names a path of this machine.
#   package_test.sh BUILD_DIR SOURCE_DIR TORCH_PREFIX
# TORCH_PREFIX: the libtorch's install prefix (pip's torch folder, or /usr),
# searched before the system, where another libtorch may lie.
set -euo pipefail
build=$1 src=$2 torch_prefix=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 || {
  cat "$tmp/install.log"; exit 1; }
# No absolute path at all in the exported targets (a path to libc10.so would
# tie the package to this machine's libtorch), and no build or source tree.
if grep -rnE -e '[";]/[A-Za-z]' -e "$build" -e "$src" "$prefix"/lib*/cmake/ddp; then
  echo "FAIL: the installed CMake package names a path of the build machine (above)"; exit 1
fi
# ccache, with paths relative to the temporary folder: the consumer's one
# libtorch translation unit (~15 s) compiles once per machine.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=$tmp
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$src/tests/package/consumer" -B "$tmp/consumer" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix;$torch_prefix" "${launcher[@]}" >"$tmp/configure.log" 2>&1 || {
  cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/consumer" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
grep "^ddp_DIR" "$tmp/consumer/CMakeCache.txt"
timeout -s KILL 120 "$prefix/bin/ddprun" --nproc-per-node 2 "$tmp/consumer/consumer"
