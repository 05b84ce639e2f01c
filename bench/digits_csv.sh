#!/usr/bin/env bash
# Writes scikit-learn's "digits" data set (1797 real 8x8 handwritten digits,
# UCI; 64 pixel values 0..16 then the label 0..9 per row) as a plain CSV for
# `ddp_bench converge --data` and bench/pytorch_converge.py --data, which
# cannot read the gzip file Debian's python3-sklearn ships. No network.
#
#   bench/digits_csv.sh /tmp/digits.csv
set -euo pipefail

src=${DIGITS_CSV_GZ:-/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz}
if [ $# -ne 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  echo "usage: bench/digits_csv.sh OUT.csv   (decompresses $src)" >&2
  exit 2
fi
out=$1
if [ ! -r "$src" ]; then
  echo "digits_csv.sh: $src not found: install Debian's python3-sklearn" \
       "(apt-get install -y python3-sklearn, or scripts/install-deps.sh)" >&2
  exit 1
fi
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
zcat "$src" >"$tmp"
rows=$(wc -l <"$tmp")
if [ "$rows" -ne 1797 ]; then
  echo "digits_csv.sh: $src has $rows rows, expected 1797" >&2
  exit 1
fi
mv "$tmp" "$out"
trap - EXIT
echo "digits_csv.sh: wrote $out (1797 rows: 64 pixels 0..16, then the label)" >&2
