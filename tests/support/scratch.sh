# What the shell tests of real jobs share: the build's ddprun and
# examples/train, a scratch folder ($tmp) removed at exit, and tap.sh's checks.
# Source it with the build folder: `. "$(dirname "$0")/../support/scratch.sh" "$1"`.
build=$1
ddprun=$build/tools/ddprun/ddprun
train=$build/examples/train
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
