#!/usr/bin/env bash
# examples/train's --device on 2 real processes: every rank says which
# device and backend it chose and why; --device cpu and auto train the same
# model where libtorch sees no GPU; --device cuda there fails every rank with
# an error that says what to check; a bad value is a usage error.
# (tests/gpu/train_gpu_test.sh is the GPU side.)
#   train_device_test.sh BUILD_DIR
set -uo pipefail
. "$(dirname "$0")/../support/scratch.sh" "$1"
if "$build/tests/gpu/gpu_probe" >/dev/null 2>&1; then
  echo "skipped: libtorch sees a GPU here (tests/gpu/train_gpu_test.sh covers this machine)"
  exit 77
fi

# job NAME FLAGS...: 2 ranks of a short synthetic run, output in $tmp/NAME.log.
job() {
  local name=$1
  shift
  timeout 120 "$ddprun" --nproc-per-node 2 "$train" --data synthetic --train-size 1024 \
    --epochs 1 --log-every 100000 "$@" >"$tmp/$name.log" 2>&1
}
hash_of() { sed -n 's/.*parameters fnv1a64 \([0-9a-f]*\).*/\1/p' "$tmp/$1.log"; }

job auto
check $? "--device auto (the default) trains" "$tmp/auto.log"
grep -q "train: device cpu (--device auto: libtorch sees no GPU)" "$tmp/auto.log"
check $? "auto says it chose the CPU because libtorch sees no GPU" "$tmp/auto.log"

job cpu --device cpu
check $? "--device cpu trains" "$tmp/cpu.log"
[[ -n $(hash_of cpu) && $(hash_of cpu) == "$(hash_of auto)" ]]
check $? "cpu and auto train the same model here ($(hash_of cpu))" "$tmp/cpu.log"

job cuda --device cuda
status=$?
[[ $status -ne 0 &&
   $(grep -c "train: --device cuda: libtorch sees no GPU in this process" "$tmp/cuda.log") -ge 1 ]]
check $? "--device cuda without a GPU fails, saying what to check" "$tmp/cuda.log"
grep -q "CUDA_VISIBLE_DEVICES" "$tmp/cuda.log"
check $? "  and names CUDA_VISIBLE_DEVICES" "$tmp/cuda.log"

"$train" --device tpu >"$tmp/usage.log" 2>&1
[[ $? -eq 2 ]] && grep -q "train: --device expects cpu, cuda or auto, got 'tpu'" "$tmp/usage.log"
check $? "--device tpu is a usage error (exit 2)" "$tmp/usage.log"
finish
