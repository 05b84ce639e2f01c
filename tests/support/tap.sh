# What the shell tests share: TAP-style result lines and a free port.
# Source it: `. "$(dirname "$0")/../support/tap.sh"`. CTest fails a test
# whose output has a "not ok" line (FAIL_REGULAR_EXPRESSION); the scripts
# also exit with $failed.
failed=0

ok() { echo "ok - $1"; }
# not_ok DESCRIPTION [LOG]: and the last lines of LOG.
not_ok() {
  echo "not ok - $1"
  [[ -n ${2:-} && -f $2 ]] && tail -5 "$2"
  failed=1
}
# check STATUS DESCRIPTION [LOG]: ok when STATUS is 0.
check() {
  if [[ $1 -eq 0 ]]; then ok "$2"; else not_ok "$2" "${3:-}"; fi
}

# fail DESCRIPTION [DETAIL...]: not ok, then each detail as a comment line.
fail() {
  not_ok "$1"
  shift
  local line
  for line in "$@"; do echo "#   ${line//$'\n'/ | }"; done
}
pass() { ok "$1"; }
# finish: the summary line and the exit status (1 when a check failed).
finish() {
  if [[ $failed -ne 0 ]]; then
    echo "some checks failed"
    exit 1
  fi
  echo "all checks passed"
  exit 0
}

# A TCP port free on 127.0.0.1 now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
