#!/usr/bin/env bash
# Builds NCCL 2.30.7 from ../shared/third_party (or NCCL_TARBALL) for the
# H100/H200 only (sm_90), limited to what ddp's nccl backend issues, into a
# cache outside the checkout; prints how long it took and the library's size.
#
#   scripts/build-nccl.sh            builds once; later calls print the cached one
#   scripts/build-nccl.sh --print    prints the cached library's folder, or fails
#
# Why: NCCL 2.30 and later accept several ranks on one GPU with
# NCCL_MULTI_RANK_GPU_ENABLE=1 (torch 2.11 brings 2.28, which refuses them),
# and pip's 2.30 libnccl.so.2 (every GPU architecture, 344 MB) cannot travel
# to the lent GPU machine (64 MiB a call). scripts/gpu-session.sh carries the
# stripped library (about 20 MB) there and loads it in place of torch's.
#
# The functions kept (NCCL's ONLY_FUNCS, src/device/generate.py): the
# collectives ddp issues (collectives/nccl/nccl.cpp: AllReduce, Broadcast,
# AllGather, ReduceScatter, and SendRecv, which NCCL uses inside them) in
# ddp's seven dtypes (collectives/dtypes.h) and every reduce op it maps
# (communicator.cpp's red_op: Sum, Prod, Min/Max, and Avg, which NCCL runs as
# PreMulSum for floats and SumPostDiv for integers). A function filtered out
# would become a no-op kernel: a silently wrong result, so keep this list a
# superset of what red_op and data_type produce.
set -euo pipefail
cd "$(dirname "$0")/.."

version=2.30.7
tarball=${NCCL_TARBALL:-../shared/third_party/nccl-$version.tar.gz}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/ddp/nccl-$version-sm90
lib=$cache/lib/libnccl.so.2
dtypes="(f32|f64|f16|bf16|i32|i64|u8)"
ops="(Sum|Prod|MinMax|PreMulSum|SumPostDiv)"
only_funcs="AllReduce $ops $dtypes * *|ReduceScatter $ops $dtypes * *|Broadcast * *|AllGather * *|SendRecv"

report() {
  local bytes
  bytes=$(stat -L -c %s "$lib")
  echo "nccl: $lib: $((bytes / 1000000)) MB stripped, built in $(cat "$cache/seconds") s"
  echo "nccl: functions kept: $(cat "$cache/funcs")"
}

if [ -f "$lib" ] && [ "$(cat "$cache/funcs" 2>/dev/null)" = "$only_funcs" ]; then
  if [ "${1:-}" = --print ]; then echo "$cache/lib"; else report; fi
  exit 0
fi
if [ "${1:-}" = --print ]; then
  echo "scripts/build-nccl.sh: no NCCL $version built in $cache; run scripts/build-nccl.sh" >&2
  exit 1
fi
[ -f "$tarball" ] || { echo "scripts/build-nccl.sh: no $tarball (NCCL_TARBALL names another)" >&2; exit 1; }
. scripts/env.sh
command -v nvcc >/dev/null || { echo "scripts/build-nccl.sh: needs nvcc (the CUDA toolkit)" >&2; exit 1; }
cuda_home=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")

work=$(mktemp -d /tmp/nccl-build.XXXXXX)
trap 'rm -rf "$work"' EXIT
src=$work/nccl
mkdir "$src"
tar -C "$src" -xzf "$tarball"
# The source at the archive's top, or in its one folder.
[ -f "$src/Makefile" ] || src=$(dirname "$(find "$src" -maxdepth 2 -name Makefile | head -1)")
# The toolkit's include folder also holds NCCL 2.28's headers, and NCCL's
# makefiles put -I$(CUDA_INC) before the source's own: a folder of links to
# every other entry keeps 2.28's nccl.h out.
mkdir "$work/cuda-include"
for entry in "$cuda_home"/include/*; do
  case $(basename "$entry") in nccl*) ;; *) ln -s "$entry" "$work/cuda-include/" ;; esac
done

start=$(date +%s)
make -C "$src" -j"$(nproc)" src.build CUDA_HOME="$cuda_home" CUDA_INC="$work/cuda-include" \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" ONLY_FUNCS="$only_funcs" \
  >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; exit 1; }
seconds=$(($(date +%s) - start))

rm -rf "$cache"
mkdir -p "$cache/lib" "$cache/include"
cp -P "$src"/build/lib/libnccl.so* "$cache/lib/"
strip --strip-unneeded "$(readlink -f "$cache/lib/libnccl.so")"
cp "$src"/build/include/nccl*.h "$cache/include/"
cp "$src/LICENSE.txt" "$cache/"
echo "$only_funcs" >"$cache/funcs"
echo "$seconds" >"$cache/seconds"
report
