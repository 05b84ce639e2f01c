# Independent cases of a shell test, run side by side: for cases that mostly
# wait (a collective's timeout, a stopped rank, a launcher's grace period),
# not for those that keep the CPUs busy. Each case is a command (a function
# of the script, usually) run in a background subshell, with its own output
# file; concurrent_wait waits for every case, each within a bound, then
# prints their outputs in the order the cases were started, so that the TAP
# lines read as if the cases had run one after another. A case that printed
# "not ok", exited non-zero or overran its bound sets $failed (tap.sh's).
#   . "$(dirname "$0")/../support/concurrent.sh"   (after tap.sh)
#   concurrent_start DIR [MAX [LIMIT_S [STAGGER_S]]]
#       DIR: a scratch folder for the outputs; MAX cases at once (default 4);
#       each killed, with what it started, after LIMIT_S (default 300); a
#       case starts STAGGER_S (default 1.5) after the one before: the ranks'
#       start (loading libtorch) is what keeps the CPUs busy, and ranks
#       that start slowly miss the store's handshake (5 s).
#   concurrently NAME COMMAND [ARG...]    start a case (waits for a free slot)
#   concurrent_wait                       all of them, then their outputs
# In a case, $failed starts at 0 and is its exit status; its background jobs
# still running when it ends are killed (SIGKILL).
_cc_dir="" _cc_max=4 _cc_limit=300 _cc_stagger_us=1500000 _cc_last_us=0
_cc_pids=() _cc_names=() _cc_starts=() _cc_killed=()

concurrent_start() {
  _cc_dir=$1/concurrent.$$.$RANDOM
  mkdir -p "$_cc_dir"
  _cc_max=${2:-4} _cc_limit=${3:-300}
  _cc_stagger_us=$(awk -v s="${4:-1.5}" 'BEGIN { printf "%d", s * 1000000 }')
  _cc_last_us=0 _cc_pids=() _cc_names=() _cc_starts=() _cc_killed=()
}

_cc_now_us() { echo "${EPOCHREALTIME/[.,]/}"; }

# _cc_n: the number of started cases still running; those past their bound
# are killed first.
_cc_running() {
  local n=0 i
  for i in "${!_cc_pids[@]}"; do
    kill -0 "${_cc_pids[$i]}" 2>/dev/null || continue
    if [[ $((SECONDS - _cc_starts[i])) -ge $_cc_limit ]]; then
      _cc_kill_tree "${_cc_pids[$i]}"
      _cc_killed[i]=1
    else
      n=$((n + 1))
    fi
  done
  _cc_n=$n
}

concurrently() {
  local name=$1 i=${#_cc_pids[@]}
  shift
  # A free slot: bounded, as the running cases are.
  _cc_running
  while [[ $_cc_n -ge $_cc_max ]]; do sleep 0.1; _cc_running; done
  while [[ $(($(_cc_now_us) - _cc_last_us)) -lt $_cc_stagger_us ]]; do sleep 0.05; done
  _cc_last_us=$(_cc_now_us)
  (
    trap 'kill -KILL $(jobs -p) 2>/dev/null' EXIT
    failed=0
    "$@"
    exit "$failed"
  ) >"$_cc_dir/$i.out" 2>&1 </dev/null &
  _cc_pids+=($!) _cc_names+=("$name") _cc_starts+=("$SECONDS") _cc_killed+=(0)
}

# Kills process $1 and its descendants.
_cc_kill_tree() {
  local child
  kill -STOP "$1" 2>/dev/null
  for child in $(pgrep -P "$1"); do _cc_kill_tree "$child"; done
  kill -KILL "$1" 2>/dev/null
}

concurrent_wait() {
  local i pid status
  for i in "${!_cc_pids[@]}"; do
    pid=${_cc_pids[$i]}
    while kill -0 "$pid" 2>/dev/null && [[ $((SECONDS - _cc_starts[i])) -lt $_cc_limit ]]; do
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      _cc_kill_tree "$pid"
      _cc_killed[i]=1
    fi
    wait "$pid" 2>/dev/null
    status=$?
    cat "$_cc_dir/$i.out"
    if [[ ${_cc_killed[$i]} -eq 1 ]]; then
      not_ok "${_cc_names[$i]}: still running after ${_cc_limit} s, killed"
    elif [[ $status -ne 0 ]]; then
      grep -q '^not ok' "$_cc_dir/$i.out" || not_ok "${_cc_names[$i]}: exited $status"
      failed=1
    fi
  done
  _cc_pids=() _cc_names=() _cc_starts=() _cc_killed=()
}
