#!/usr/bin/env bash
# ThreadSanitizer run of the multirank and multiprocess tiers: builds them with
# -fsanitize=thread -O1 -g against Debian's libtorch 1.13 in their own build
# directory (through scripts/build.sh, so ccache keeps a rebuild short), runs
# the multirank GoogleTest binary (threads as ranks: collectives, groups, shm,
# hierarchical, errors, the Reducer, Join) and multiprocess tests through
# ctest (real processes through ddprun), and reports every TSan report by its
# first frames.
#
# CI runs a part of it (.ci/run: TSAN_CI=1, below). The whole of it takes
# longer: a cold build is 30 to 45 minutes here (-j2 on a shared 2-core
# machine), and the run (about 16 minutes) is several times slower than the
# plain suite. libtorch, Gloo,
# Open MPI and libstdc++ are not instrumented (scripts/tsan.supp says what is
# suppressed there and why; nothing in ddp's own code is). Under TSan's
# slowdown some wall-clock bounds of rendezvous_and_faults (10 s, 25 s:
# "... took N s") can fail on a loaded machine; those lines are timing, not
# TSan findings, which are listed at the end from build-tsan/tsan-logs.
#
#   scripts/tsan.sh [BUILD_DIR]        default build-tsan; JOBS=N (default 2)
#   TSAN_CI=1 scripts/tsan.sh          CI's part (the choice is below)
#   TSAN_CTEST_REGEX=... scripts/tsan.sh   another choice of ctest tests
#   GTEST_FILTER='Shm.*:Hierarchical.*' scripts/tsan.sh   part of the multirank tier
# Exit status: 0 when every test passed and TSan reported nothing.
set -uo pipefail
# All in a function: bash reads the whole body before running it, so an edit
# of this file during a run cannot change what the run does.
main() {
  cd "$(dirname "$0")/.."
  root=$PWD
  build=${1:-build-tsan}
  jobs=${JOBS:-2}
  logs=$root/$build/tsan-logs
  tests_regex=${TSAN_CTEST_REGEX:-'^(launcher|rendezvous_and_faults|ddp_equivalence_2ranks|ddp_equivalence_gloo_3ranks|ddp_bad_input_2ranks|ddp_debug_log|comm_hooks_2ranks|shm_processes|timeline)$'}
  if [ -n "${TSAN_CI:-}" ]; then
    # CI's part, about 10 minutes with ccache warm: the process tests of the
    # shm and Gloo backends, DDP and hooks on them, the launcher and the
    # timeline; rendezvous_and_faults is left out for its wall-clock bounds.
    # The multirank tier whole but for the collective sweep at world sizes
    # 4 and 7 (two thirds of its time under TSan; sizes 1, 2 and 3 stay).
    tests_regex=${TSAN_CTEST_REGEX:-'^(launcher|ddp_equivalence_2ranks|ddp_equivalence_gloo_3ranks|ddp_bad_input_2ranks|comm_hooks_2ranks|shm_processes|timeline)$'}
    export GTEST_FILTER=${GTEST_FILTER:-'-WorldSizes/Sweep.*/*world4:WorldSizes/Sweep.*/*world7'}
  fi
  # examples/collectives: rendezvous_and_faults' job.
  targets=(multirank_tests ddprun ddp-store ddp_equivalence comm_hooks_test shm_job fault_rank
           timeline_job collectives)

  # CXXFLAGS and LDFLAGS reach CMake at a build directory's first
  # configuration; RelWithDebInfo's own flags become -O1 (-g is above).
  [ -f "$build/CMakeCache.txt" ] && ! grep -q 'fsanitize=thread' "$build/CMakeCache.txt" && {
    echo "tsan: $build was configured without TSan; configuring it again" >&2
    rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"; }
  # CCACHE_NOHASHDIR: with -g, ccache would hash the working directory (for
  # the debug info's paths), so that CI's fresh clone would miss every file.
  CCACHE_NOHASHDIR=1 CXXFLAGS="-fsanitize=thread -fno-omit-frame-pointer -g" LDFLAGS=-fsanitize=thread \
    DDP_LIBTORCH=debian DDP_BUILD_DIR=$build DDP_BUILD_JOBS=$jobs DDP_BUILD_TARGETS="${targets[*]}" \
    DDP_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -DDDP_BUILD_BENCH=OFF" \
    scripts/build.sh >/dev/null || exit 1

  rm -rf "$logs" && mkdir -p "$logs"
  # Every report goes to $logs/tsan.<pid> (processes launched by tests too), so
  # that the tests' own output checks see only their output; a process with a
  # report exits 66, which fails its test.
  # ignore_noninstrumented_modules: memcpy, writev, memcmp, ... called from
  # libtorch, Gloo, Open MPI or libstdc++ are not checked. Their plain loads
  # and stores are invisible to TSan anyway, and so are their atomics (their
  # pthread calls are still seen), so what these calls alone showed was
  # noise, and costly: each writev of a
  # Gloo buffer built a race report over megabytes of shadow memory (then
  # suppressed) while Gloo's loop thread held the pair's mutex, so that 1M-
  # element allgathers timed out at 60 s (Sweep.CoalescedBroadcast... over
  # gloo); and two thread-ranks loading their optimizer state at once
  # (OptimizerJoinable::finish_join, libtorch's deserializer) showed a
  # memcmp on memory the other's libtorch code had allocated, ordered by
  # synchronization inside libtorch (Join.*). ddp's own accesses stay
  # checked against each other; a race between ddp and a memcpy inside
  # libtorch (a tensor's copy_) is no longer reported.
  export TSAN_OPTIONS="suppressions=$root/scripts/tsan.supp log_path=$logs/tsan second_deadlock_stack=1 history_size=4 ignore_noninstrumented_modules=1 ${TSAN_OPTIONS:-}"

  failed=0
  echo "== multiprocess tests: ctest -R '$tests_regex' (output: $logs/ctest.log)"
  ctest --test-dir "$build" -R "$tests_regex" --output-on-failure >"$logs/ctest.log" 2>&1 || failed=1
  grep -E '^ *[0-9]+/[0-9]+ Test|tests passed|tests failed|^not ok' "$logs/ctest.log"
  echo "== multirank_tests, threads as ranks (output: $logs/multirank.log)"
  stdbuf -oL -eL "$build/tests/multirank_tests" >"$logs/multirank.log" 2>&1 || failed=1
  grep -E '^\[  PASSED  \]|^\[  FAILED  \]|test suites ran' "$logs/multirank.log" ||
    { echo "multirank_tests ended without its summary:"; tail -n 5 "$logs/multirank.log"; }

  # The reports: kind and the first three frames of each stack.
  reports=$(cat "$logs"/tsan.* 2>/dev/null | grep -c '^WARNING: ThreadSanitizer' || true)
  echo "== TSan: $reports report(s) in $logs"
  for f in "$logs"/tsan.*; do
    [ -e "$f" ] || continue
    awk -v file="$(basename "$f")" '
      /^WARNING: ThreadSanitizer/ { kind = $0; sub(/ \(pid=.*/, "", kind); n = 0; next }
      kind != "" && /^    #[0-9]/ && n < 3 { frames = frames "\n      " $0; n++ }
      /^SUMMARY: ThreadSanitizer/ { print "  " file ": " kind frames; kind = ""; frames = "" }
    ' "$f"
  done
  [ "$reports" -eq 0 ] || failed=1
  exit $failed
}
main "$@"
