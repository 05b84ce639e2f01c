#!/usr/bin/env bash
# The targets that the tests ctest ARGS... selects run, for scripts/test.sh:
# the programs of the build (BUILD_DIR) that their commands name (the one
# they start, and those it is given, as ddprun is), with the Gloo module
# every program loads. Prints nothing (build everything) when a selected
# test does not start a program of the build: a shell test, whose programs
# its script names.
#   test-targets.sh BUILD_DIR ARGS...
set -euo pipefail
dir=$1
shift
all=$(cmake --build "$dir" --target help | sed -n 's/^\.\.\. \([^ ]*\).*/\1/p')
commands=$(ctest --test-dir "$dir" -N -V "$@" | sed -n 's/^[0-9]*: Test command: //p')
[ -n "$commands" ] || exit 0
build=$(cd "$dir" && pwd)
# A program of the build: a path inside it whose name is a target's.
target_of() {
  local word=${1//\"/}
  [[ "$word" == "$build"/* ]] && grep -qx "$(basename "$word")" <<<"$all" && basename "$word"
}
targets=()
while read -r program arguments; do
  target_of "$program" >/dev/null || exit 0  # build everything
  for word in $program $arguments; do
    if name=$(target_of "$word"); then targets+=("$name"); fi
  done
done <<<"$commands"
printf '%s\n' "${targets[@]}" ddp_gloo | sort -u | tr '\n' ' '
