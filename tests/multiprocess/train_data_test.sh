#!/usr/bin/env bash
# examples/train's data on 2 real processes: Fashion-MNIST (Debian's
# dataset-fashion-mnist) trains the CNN for one epoch to a useful accuracy;
# a data directory without the files falls back to synthetic data, saying
# so; a missing, truncated or corrupt file fails every rank with an error
# that names the file, and nothing half-written is left in the cache.
#   train_data_test.sh BUILD_DIR
# Exit 77 (skipped) where the package is not installed.
set -uo pipefail
build=$1
ddprun=$build/tools/ddprun/ddprun
train=$build/examples/train
source_dir=/usr/share/datasets/fashion-mnist
if [[ ! -f $source_dir/train-images-idx3-ubyte.gz ]]; then
  echo "skipped: $source_dir has no Fashion-MNIST (apt-get install dataset-fashion-mnist)"
  exit 77
fi
tmp=$(mktemp -d)
pids=()
trap 'kill -KILL "${pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
. "$(dirname "$0")/../support/tap.sh"
export XDG_CACHE_HOME=$tmp/cache

# job NAME DATA_DIR FLAGS...: runs 2 ranks, output in $tmp/NAME.log; its status.
job() {
  local name=$1 dir=$2
  shift 2
  timeout 600 "$ddprun" --nproc-per-node 2 "$train" --data-dir "$dir" --log-every 100000 \
    --checkpoint "$tmp/$name.pt" "$@" >"$tmp/$name.log" 2>&1
}

# The real thing: one epoch of the CNN.
job real "$source_dir" --epochs 1
status=$?
accuracy=$(sed -n 's/.*accuracy \([0-9.]*\)%.*/\1/p' "$tmp/real.log")
[[ $status -eq 0 ]] && grep -q "Fashion-MNIST" "$tmp/real.log" &&
  awk -v a="${accuracy:-0}" 'BEGIN { exit !(a >= 75) }'
check $? "Fashion-MNIST, 1 epoch of the CNN on 2 ranks: held-out accuracy ${accuracy:-?}% (>= 75%)" \
  "$tmp/real.log"
[[ $(ls "$XDG_CACHE_HOME/ddp/fashion-mnist" | tr '\n' ' ') == \
   "t10k-images-idx3-ubyte t10k-labels-idx1-ubyte train-images-idx3-ubyte train-labels-idx1-ubyte " ]]
check $? "the cache holds the four unzipped files and nothing half-written"

# No package: synthetic data, said once.
mkdir -p "$tmp/empty"
job empty "$tmp/empty" --epochs 1 --train-size 512
status=$?
[[ $status -eq 0 && $(grep -c "training on synthetic data instead" "$tmp/empty.log") -eq 1 ]]
check $? "no Fashion-MNIST in the data directory: synthetic data, said once" "$tmp/empty.log"

# bad NAME FILE DESCRIPTION: FILE (a path in $tmp/NAME) must be named by
# both ranks. Launched by hand, not by ddprun: ddprun would stop one rank as
# soon as the other failed.
bad() {
  local name=$1 file=$2 what=$3 port r failures=0 named=0
  rm -rf "$XDG_CACHE_HOME"
  port=$(free_port)
  pids=()
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 120 "$train" \
      --data-dir "$tmp/$name" --epochs 1 --timeout 20 >"$tmp/$name.$r.log" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do
    wait "${pids[$r]}" || ((failures++))
    grep -q "^train: .*$file" "$tmp/$name.$r.log" && ((named++))
  done
  [[ $failures -eq 2 && $named -eq 2 ]]
  check $? "$what: both ranks fail naming $(basename "$file") ($failures failed, $named named it)" \
    "$tmp/$name.0.log"
}
for name in missing truncated corrupt; do
  mkdir -p "$tmp/$name"
  cp "$source_dir"/*.gz "$tmp/$name/"
done
rm "$tmp/missing/t10k-labels-idx1-ubyte.gz"
bad missing "$tmp/missing/t10k-labels-idx1-ubyte.gz" "a missing file"
head -c 100000 "$source_dir/train-images-idx3-ubyte.gz" >"$tmp/truncated/train-images-idx3-ubyte.gz"
bad truncated "$tmp/truncated/train-images-idx3-ubyte.gz" "a truncated file"
printf '\xde\xad\xbe\xef%.0s' {1..64} |
  dd of="$tmp/corrupt/train-labels-idx1-ubyte.gz" bs=1 seek=2000 conv=notrunc status=none
bad corrupt "$tmp/corrupt/train-labels-idx1-ubyte.gz" "a corrupt file"
exit $failed
