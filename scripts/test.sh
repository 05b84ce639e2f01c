#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: install, build, ctest.
# Against pip's torch (the primary tier); DDP_LIBTORCH=debian runs it against
# Debian's libtorch 1.13. Tests labelled gpu report themselves skipped where
# no GPU is visible (scripts/test-gpu.sh runs them on one).
# Arguments go to ctest, after -j 2 (DDP_TEST_JOBS=N: N tests at a time):
# most tests wait more than they compute (ranks at a rendezvous, a timeout,
# a launcher's grace period), so two at a time on 2 cores halve the suite's
# time; a test that must run alone says so (CTest's RUN_SERIAL). With -R
# PATTERN (docs/testing.md, "One test"), only the programs those tests run
# are built, when every one of them runs a program of the build (a shell
# test's programs are its own to name: then everything is built).
# DDP_BUILD_TARGETS, when set, decides instead.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DDP_BUILD_TARGETS+set}" ] && [[ " $* " == *" -R "* ]]; then
  dir=$(DDP_BUILD_TARGETS=none scripts/build.sh)
  targets=$(scripts/test-targets.sh "$dir" "$@")
  dir=$(DDP_SKIP_INSTALL=1 DDP_BUILD_TARGETS="$targets" scripts/build.sh)
else
  dir=$(scripts/build.sh)
fi
ctest --test-dir "$dir" --output-on-failure -j "${DDP_TEST_JOBS:-2}" "$@"
