#!/usr/bin/env bash
# The second test tier: the whole CTest suite on libtorch 2.x (Debian 13
# "trixie": libtorch-dev 2.6, libgloo-dev, python3-torch 2.6 as PyTorch's
# reference DDP), in a debootstrap chroot. Run as root on Debian 12.
#
# The chroot is made once and reused (DDP_TRIXIE_ROOT, default
# /var/cache/ddp/trixie-chroot); a stamp file holds the package list, so a
# change to it installs again. The source tree (tracked and untracked,
# not ignored files) is copied to /ddp/src inside, built in /ddp/build (-j2,
# ccache in /ddp/ccache: both kept between runs). Only /proc, /dev, /dev/pts
# and /dev/shm are bind-mounted (and the chroot onto itself, so that its /
# is a mount point, as `ip netns exec` needs), and every mount under the
# chroot is undone on every exit path (trap).
#   scripts/test-libtorch2.sh [CTEST ARGS...]     e.g. -R reference
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
root=${DDP_TRIXIE_ROOT:-/var/cache/ddp/trixie-chroot}
mirror=${DDP_TRIXIE_MIRROR:-http://deb.debian.org/debian}

packages=(
  build-essential cmake ccache git   # the build
  libtorch-dev libgloo-dev           # libtorch 2.6 and the system Gloo
  libgtest-dev                       # GoogleTest
  libopenblas0-pthread               # fast BLAS for libtorch
  python3-torch python3-numpy        # PyTorch 2.6's DDP: the reference tests
  openmpi-bin libopenmpi-dev         # the MPI backend and mpirun
  coreutils procps iproute2          # timeout, kill, ip netns in the tests
)

[ "$(id -u)" -eq 0 ] || { echo "test-libtorch2: run as root (debootstrap, chroot, mount)" >&2; exit 1; }
command -v debootstrap >/dev/null || scripts/install-deps.sh
mkdir -p "$(dirname "$root")"

# One run at a time per chroot: a second waits (bounded) rather than sharing mounts.
exec 9>"$root.lock"
flock -w 1800 9 || { echo "test-libtorch2: $root is in use by another run (30 min)" >&2; exit 1; }

unmount_all() {
  # Every mount point under the chroot, deepest first (also what a killed
  # test left, e.g. ip netns' /run/netns binds).
  local m
  for m in $(awk -v r="$root/" 'index($2, r) == 1 { print $2 }' /proc/self/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m"
  done
  if awk -v r="$root" '$2 == r { found = 1 } END { exit !found }' /proc/self/mounts; then
    umount "$root" 2>/dev/null || umount -l "$root"
  fi
}
mount_all() {
  mount --bind "$root" "$root"
  mount --bind /proc "$root/proc"
  mount --bind /dev "$root/dev"
  mount --bind /dev/pts "$root/dev/pts"
  mount --bind /dev/shm "$root/dev/shm"
}
trap unmount_all EXIT
trap 'exit 130' INT TERM
in_root() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }

t0=$SECONDS
if [ ! -f "$root/.ddp-base" ]; then
  echo "test-libtorch2: debootstrap trixie into $root"
  unmount_all
  rm -rf "$root.partial"
  debootstrap --variant=minbase trixie "$root.partial" "$mirror" >"$root.debootstrap.log" 2>&1 || {
    tail -20 "$root.debootstrap.log"; exit 1; }
  rm -rf "$root"
  mv "$root.partial" "$root"
  touch "$root/.ddp-base"
  echo "test-libtorch2: chroot made in $((SECONDS - t0)) s"
fi

unmount_all   # a previous run killed before its trap ran
mount_all
cp /etc/resolv.conf "$root/etc/resolv.conf"

t1=$SECONDS
if [ "$(cat "$root/.ddp-packages" 2>/dev/null)" != "${packages[*]}" ]; then
  echo "test-libtorch2: installing ${packages[*]}"
  rm -f "$root/.ddp-packages"
  in_root apt-get update -qq >/dev/null
  in_root apt-get install -y -qq --no-install-recommends "${packages[@]}" >"$root.apt.log" 2>&1 || {
    tail -30 "$root.apt.log"; exit 1; }
  in_root apt-get clean
  echo "${packages[*]}" >"$root/.ddp-packages"
  echo "test-libtorch2: packages installed in $((SECONDS - t1)) s"
fi
echo "test-libtorch2: libtorch $(in_root dpkg-query -W -f='${Version}' libtorch-dev)," \
     "python3-torch $(in_root dpkg-query -W -f='${Version}' python3-torch)"

# The working tree as the main tier sees it: tracked and untracked, not ignored.
rm -rf "$root/ddp/src"
mkdir -p "$root/ddp/src" "$root/ddp/build" "$root/ddp/ccache"
git ls-files -z --cached --others --exclude-standard | \
  xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' _ | \
  tar -c --null -T - | tar -x -C "$root/ddp/src"

t2=$SECONDS
in_root sh -c 'cd /ddp && export CCACHE_DIR=/ddp/ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache &&
  cmake -S src -B build -DCMAKE_BUILD_TYPE=Release >build/configure.log 2>&1 ||
    { cat build/configure.log; exit 1; }
  cmake --build build -j2 >build/build.log 2>&1 || { grep -B2 -A12 "error" build/build.log | head -150; exit 1; }'
echo "test-libtorch2: built in $((SECONDS - t2)) s"

t3=$SECONDS
rc=0
in_root sh -c 'cd /ddp && ctest --test-dir build --output-on-failure "$@"' _ "$@" || rc=$?
echo "test-libtorch2: ctest took $((SECONDS - t3)) s, exit $rc (libtorch 2.x tier)"
exit $rc
