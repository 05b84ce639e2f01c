# What the shell tests share: TAP-style result lines, a free port, and the
# facts of a ddp error a test program printed (ddp_error).
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

# ddp_error FILE CHECK...: whether FILE shows a ddp error that passes every
# CHECK. The facts, from the line a test program prints after the error
# (tests/support/error_facts.h: "ddp error facts: type=... peers=..."), all
# on one such line:
#   type=T rank=R world=N backend=B operation=OP peers=P   a fact's exact
#       value (peers=1,2 or peers=none; backend= for none)
#   is=T      the type is T or derives from it, as `catch (const T&)` takes
#       it (is=CommunicationError: a TimeoutError too)
#   peers~R   the peers hold rank R
# What the message shows, all in one message (from a line holding "ddp: "
# to the facts line after it, or the end):
#   at=CONTEXT   its prefix is "ddp: CONTEXT: ", the context as the formatter
#       writes it ("rank 1 of 2 [gloo]: allreduce"): the facts of a program
#       that prints no facts line (examples/, a launcher's relay)
#   shows=TEXT   a name or value it must show (a variable and its value, a
#       path, host:port), never a phrase of its sentence
# Where FILE holds several errors (ranks' lines interleaved by a launcher),
# the facts and the message may be met by two of them: name the rank in
# both (rank=, at=) where that matters.
#   ddp_error "$log" type=TimeoutError rank=0 peers=1 shows=MASTER_PORT
ddp_error() {
  local file=$1 check
  shift
  local -a facts=() shows=()
  for check in "$@"; do
    case $check in
      type=* | is=* | rank=* | world=* | backend=* | operation=* | peers=* | peers~*) facts+=("$check") ;;
      at=*) shows+=("ddp: ${check#at=}: ") ;;
      shows=*) shows+=("${check#shows=}") ;;
      *) echo "ddp_error: unknown check '$check'" >&2; return 2 ;;
    esac
  done
  if [[ ${#facts[@]} -gt 0 ]] && [[ -z $(ddp_error_facts "$file" "${facts[@]}") ]]; then return 1; fi
  [[ ${#shows[@]} -eq 0 ]] && return 0
  # One message at a time, as it closes (at its facts line, or the end).
  local line message="" open=0
  while IFS= read -r line || [[ -n $line ]]; do
    if [[ $open -eq 1 && $line == *"ddp error facts: "* ]]; then
      open=0
      ddp_message_shows "$message" "${shows[@]}" && return 0
    elif [[ $open -eq 1 ]]; then
      message+=$line$'\n'
    elif [[ $line == *"ddp: "* ]]; then
      open=1 message=$line$'\n'
    fi
  done <"$file"
  [[ $open -eq 1 ]] && ddp_message_shows "$message" "${shows[@]}"
}
# ddp_error_is TYPE BASE: whether ddp's TYPE is BASE or derives from it.
ddp_error_is() {
  [[ $1 == "$2" || $2 == Error || ($2 == CommunicationError && $1 == TimeoutError) ||
     ($2 == InvalidArgument && $1 == CollectiveMismatch) ]]
}
# ddp_message_shows MESSAGE TEXT...: MESSAGE holds every TEXT.
ddp_message_shows() {
  local message=$1 text
  shift
  for text in "$@"; do [[ $message == *"$text"* ]] || return 1; done
}

# ddp_error_facts FILE FACT...: the facts lines of FILE that pass every FACT
# (ddp_error's type=, is=, rank=, ..., peers~R), e.g. to count the ranks that
# raised one error.
ddp_error_facts() {
  local file=$1 line fact key want
  shift
  local re='ddp error facts: type=([^ ]*) rank=(-?[0-9]+) world=([0-9]+) backend=([^ ]*) operation=(.*) peers=([0-9,]+|none)$'
  while IFS= read -r line; do
    [[ $line =~ $re ]] || continue
    local -A got=([type]=${BASH_REMATCH[1]} [rank]=${BASH_REMATCH[2]} [world]=${BASH_REMATCH[3]}
                  [backend]=${BASH_REMATCH[4]} [operation]=${BASH_REMATCH[5]} [peers]=${BASH_REMATCH[6]})
    for fact in "$@"; do
      if [[ $fact == peers~* ]]; then
        [[ ,${got[peers]}, == *,${fact#peers~},* ]] || continue 2
      elif [[ $fact == is=* ]]; then
        ddp_error_is "${got[type]}" "${fact#is=}" || continue 2
      else
        key=${fact%%=*} want=${fact#*=}
        [[ ${got[$key]} == "$want" ]] || continue 2
      fi
    done
    echo "$line"
  done < <(grep -F -- "ddp error facts: " "$file")
}
