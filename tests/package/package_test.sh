#!/usr/bin/env bash
# The exported CMake package: installs the build to a temporary prefix and
# builds a consumer project with find_package(ddp) against it, pointed at
# libtorch in each way a user may point it, then runs it on 2 ranks with the
# installed ddprun. Each case ends in a working program or a configure-time
# error that names both libtorchs, never a crash:
#   default      nothing points at torch (Debian's libtorch may be installed):
#                the package finds the libtorch ddp was built against
#   torch_dir    Torch_DIR at that libtorch's CMake folder
#   prefix_path  CMAKE_PREFIX_PATH at that libtorch's install prefix
#   own_find     the project finds Torch itself first, by Torch_DIR alone:
#                refused where that took another libtorch's Caffe2 package
#   other        Torch_DIR at another libtorch (Debian's, or pip's for the
#                Debian tier): refused at configure time
#   another_libtorch  a program that loads the other libtorch's libc10 at run
#                time: libddp refuses to make a group, naming both
# Also fails if the installed targets name a path of this machine.
#   package_test.sh BUILD_DIR SOURCE_DIR TORCH_DIR TORCH_PREFIX
# TORCH_DIR, TORCH_PREFIX: the build's libtorch (its TorchConfig.cmake's
# folder; its install prefix: pip's torch folder, or /usr).
set -euo pipefail
build=$(realpath "$1") src=$(realpath "$2") torch_dir=$3 torch_prefix=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "FAIL: $*"; exit 1; }
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 || {
  cat "$tmp/install.log"; exit 1; }
# No absolute path in the exported targets (a path to libc10.so would tie the
# package to this machine's libtorch), nor a build or source tree anywhere.
# The one absolute path is where the package's libtorch was, its first guess.
if grep -rnE -e '[";]/[A-Za-z]' -e "$build" -e "$src" "$prefix"/lib*/cmake/ddp/ddpTargets*.cmake ||
   grep -n -e "$build" -e "$src" "$prefix"/lib*/cmake/ddp/ddpConfig.cmake; then
  fail "the installed CMake package names a path of the build machine (above)"
fi

# Another libtorch on this machine, for the refusals: Debian's, or for a
# build against Debian's the project's pip torch.
same_dir() { [ "$(realpath "$1")" = "$(realpath "$2")" ]; }
system_cmake=/usr/lib/$(gcc -print-multiarch)/cmake  # Debian's packages' CMake folder
other=""
for candidate in "$system_cmake/Torch" \
                 "${XDG_CACHE_HOME:-$HOME/.cache}"/ddp/venv-torch-*/lib/python3*/site-packages/torch/share/cmake/Torch; do
  if [ -f "$candidate/TorchConfig.cmake" ] && ! same_dir "$candidate" "$torch_dir"; then
    other=$candidate; break
  fi
done

# ccache, with paths relative to the temporary folder: the consumer's one
# libtorch translation unit compiles once per machine.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=$tmp
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
configure() {  # configure NAME CMAKE_ARGS...: the consumer into $tmp/NAME
  local name=$1; shift
  cmake -S "$src/tests/package/consumer" -B "$tmp/$name" -DCMAKE_BUILD_TYPE=Release \
        "${launcher[@]}" "$@" >"$tmp/$name.configure.log" 2>&1
}
works() {  # works NAME CMAKE_ARGS...: configures, builds and runs on 2 ranks
  local name=$1; shift
  configure "$name" "$@" || { cat "$tmp/$name.configure.log"; fail "$name: configure"; }
  cmake --build "$tmp/$name" >"$tmp/$name.build.log" 2>&1 || {
    cat "$tmp/$name.build.log"; fail "$name: build"; }
  local found
  found=$(sed -n 's/^Torch_DIR:[A-Z]*=//p' "$tmp/$name/CMakeCache.txt")
  same_dir "$found" "$torch_dir" || fail "$name: found Torch in $found, not $torch_dir"
  # One libtorch in the program: one libc10.
  local c10s
  c10s=$(ldd "$tmp/$name/consumer" | grep -c 'libc10\.so' || true)
  [ "$c10s" = 1 ] || { ldd "$tmp/$name/consumer"; fail "$name: links $c10s libc10s"; }
  timeout -s KILL 120 "$prefix/bin/ddprun" --nproc-per-node 2 "$tmp/$name/consumer" ||
    fail "$name: the program failed"
  echo "ok: $name (Torch_DIR $found)"
}
refused() {  # refused NAME FACT...: NAME's configure failed naming every FACT
  local name=$1; shift
  tr -s ' \n' ' ' <"$tmp/$name.configure.log" >"$tmp/$name.message"
  for fact in "$@"; do
    grep -qF -- "$fact" "$tmp/$name.message" || {
      cat "$tmp/$name.configure.log"; fail "$name: the refusal does not name '$fact'"; }
  done
}

works default -DCMAKE_PREFIX_PATH="$prefix"
works torch_dir -DCMAKE_PREFIX_PATH="$prefix" -DTorch_DIR="$torch_dir"
works prefix_path -DCMAKE_PREFIX_PATH="$prefix;$torch_prefix"
# The project finds Torch itself, by Torch_DIR alone, before ddp: where the
# system holds another libtorch's Caffe2 package, TorchConfig.cmake takes
# that one (the targets torch_cpu, c10), and ddp must refuse it naming the
# Caffe2 beside Torch_DIR; elsewhere the program works.
system_caffe2=$system_cmake/Caffe2
if [ -f "$system_caffe2/Caffe2Config.cmake" ] && ! same_dir "$system_caffe2" "$torch_dir/../Caffe2"; then
  if configure own_find -DCMAKE_PREFIX_PATH="$prefix" -DTorch_DIR="$torch_dir" \
       -DCONSUMER_FINDS_TORCH_FIRST=ON; then
    fail "own_find: a project whose Torch took another libtorch's Caffe2 configured"
  fi
  refused own_find "$(realpath "$torch_dir/../Caffe2")" Caffe2_DIR
  echo "ok: own_find (refused: Caffe2 from $system_caffe2)"
else
  works own_find -DCMAKE_PREFIX_PATH="$prefix" -DTorch_DIR="$torch_dir" -DCONSUMER_FINDS_TORCH_FIRST=ON
fi

if [ -z "$other" ]; then
  echo "ok: other # SKIP no other libtorch on this machine"
  echo "ok: another_libtorch # SKIP no other libtorch on this machine"
  exit 0
fi
# The refusal names what ddp was built against, what was found, and the
# variable that fixes it.
if configure other -DCMAKE_PREFIX_PATH="$prefix" -DTorch_DIR="$other"; then
  fail "other: a consumer of another libtorch ($other) configured"
fi
ours=$(sed -n 's/^set(ddp_TORCH_VERSION "\(.*\)").*/\1/p' "$prefix"/lib*/cmake/ddp/ddpConfig.cmake)
theirs=$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")/\1/p' "$other/TorchConfigVersion.cmake")
refused other "libtorch $ours" "libtorch $theirs" "$other" Torch_DIR CMAKE_PREFIX_PATH
echo "ok: other (refused: built against $ours, found $theirs)"

# Two libtorchs that are both linked into a program crash inside the
# dynamic loader, in their static initialisers, before any of libddp's code
# runs: the configure-time refusal above is what prevents that. What libddp
# can refuse at run time is a second libtorch loaded later (a plugin, an
# embedded interpreter's extension): the program loads the other libc10.
# (Debian's: lib/<arch>/cmake/Torch beside lib/<arch>/libc10.so; pip's:
# share/cmake/Torch beside lib/libc10.so.)
other_c10=$(ls "$other"/../../libc10.so* "$other"/../../../lib/libc10.so* 2>/dev/null | head -n 1 || true)
[ -n "$other_c10" ] || fail "another_libtorch: no libc10 beside $other"
cmake -S "$src/tests/package/another_libtorch" -B "$tmp/another" -DCMAKE_BUILD_TYPE=Release \
      "${launcher[@]}" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/another.configure.log" 2>&1 || {
  cat "$tmp/another.configure.log"; fail "another_libtorch: configure"; }
cmake --build "$tmp/another" >"$tmp/another.build.log" 2>&1 || {
  cat "$tmp/another.build.log"; fail "another_libtorch: build"; }
rc=0
WORLD_SIZE=1 RANK=0 timeout -s KILL 60 "$tmp/another/another_libtorch" "$other_c10" \
  >"$tmp/another.out" 2>&1 || rc=$?
cat "$tmp/another.out"
[ "$rc" = 3 ] || fail "another_libtorch: exit $rc, not the refusal's 3"
# Both libtorchs' folders are named.
own_c10=$(ldd "$tmp/another/another_libtorch" | sed -n 's/.*libc10\.so[^ ]* => \([^ ]*\).*/\1/p')
for c10 in "$own_c10" "$other_c10"; do
  folder=$(dirname "$(realpath "$c10")")
  grep -qF "$folder" "$tmp/another.out" || fail "another_libtorch: the refusal does not name $folder"
done
echo "ok: another_libtorch (refused at run time)"
