#!/usr/bin/env bash
# A one-node Slurm cluster on this host for the srun tests: Debian's slurmctld
# and slurmd with a munged of their own, every file (configuration, state,
# logs, the munge key and socket) under one directory, on free ports.
#
#   cluster.sh start DIR   # prints nothing on success; DIR/env is then to be
#                          # sourced (SLURM_CONF); exits 77 saying why where
#                          # this host cannot run the daemons
#   cluster.sh stop DIR    # stops what start started (safe to repeat)
#
# The node declares TASK_SLOTS (default 8) CPUs whatever the host has
# (SlurmdParameters=config_overrides), so that `srun -n 4` runs on 2 cores.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/tap.sh"

action=${1:?usage: cluster.sh start|stop DIR}
dir=${2:?usage: cluster.sh start|stop DIR}

skip() {
  echo "skipped: $1" >&2
  exit 77
}

stop() {
  for pidfile in "$dir"/run/slurmd.pid "$dir"/run/slurmctld.pid "$dir"/munge/munged.pid; do
    [[ -f $pidfile ]] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
}

if [[ $action == stop ]]; then
  stop
  exit 0
fi
[[ $action == start ]] || { echo "cluster.sh: unknown action '$action'" >&2; exit 2; }

for daemon in slurmctld slurmd munged; do
  command -v "$daemon" >/dev/null || [[ -x /usr/sbin/$daemon ]] ||
    skip "$daemon is not installed (scripts/install-deps.sh installs slurm-wlm and munge)"
done
[[ $(id -u) -eq 0 ]] || skip "slurmd runs tasks as their user and must start as root"
node=$(hostname)
getent hosts "$node" >/dev/null ||
  skip "this host's name '$node' does not resolve: srun's ranks find rank 0 by it"

mkdir -p "$dir"/{state,spool,run,log,munge}
chmod 700 "$dir/munge"
# A munge key of this cluster's own, and a munged that serves only it.
[[ -f $dir/munge/munge.key ]] || mungekey --create --keyfile="$dir/munge/munge.key" 2>/dev/null ||
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$dir/munge/munge.key"
/usr/sbin/munged --force --socket="$dir/munge/munge.sock" --key-file="$dir/munge/munge.key" \
  --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/seed" \
  --log-file="$dir/munge/munged.log" ||
  skip "munged does not start here (see $dir/munge/munged.log)"

cat >"$dir/slurm.conf" <<CONF
ClusterName=ddp-test
FirstJobId=$((1 + RANDOM % 700))
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.sock
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
MinJobAge=5
InactiveLimit=0
NodeName=$node NodeAddr=127.0.0.1 CPUs=${TASK_SLOTS:-8} RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=30 State=UP OverSubscribe=YES
CONF
echo "export SLURM_CONF=$dir/slurm.conf" >"$dir/env"
export SLURM_CONF=$dir/slurm.conf

slurmctld || { stop; skip "slurmctld does not start here: $(tail -3 "$dir/log/slurmctld.log")"; }
slurmd || { stop; skip "slurmd does not start here: $(tail -3 "$dir/log/slurmd.log")"; }
# The node is ready when the controller sees it idle (at most 30 s).
for _ in $(seq 300); do
  state=$(sinfo --noheader --nodes="$node" --format=%t 2>/dev/null || true)
  [[ $state == idle ]] && exit 0
  sleep 0.1
done
stop
skip "the node did not come up (state '${state:-none}'); slurmd's log: $(tail -3 "$dir/log/slurmd.log")"
