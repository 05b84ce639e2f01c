#!/usr/bin/env python3
"""ddp-chaos: failures injected into a running elastic job, then the job checked.

ddp-chaos starts an elastic job the way `ddprun --elastic` does (a ddp-store,
then N ranks with RANK, WORLD_SIZE, MASTER_ADDR/PORT and the elastic bounds),
but it owns every process, so it can fail them: from a seeded schedule, one
event at a time, each once the job has re-formed after the last and every
stopped member is back:

  kill            SIGKILL of a random member
  stop            SIGSTOP of a random member, SIGCONT --stop-s later (it
                  comes back as a joiner of a later generation; a stop
                  shorter than the job's collective timeout is ridden out)
  join            a new process without a RANK (a fresh member id)
  formation-kill  a join, and SIGKILL of a random member as soon as the store
                  has decided the generation that takes it in (the kill lands
                  while the members build the group and hand the state over)
  handover-kill   (with --zero jobs) a join whose process dies in the middle
                  of its first ZeRO handover (DDP_FAULT_POINT, fault_point.h)

Every event is written to --log as one JSON line with its time, so that
--replay LOG applies the same events to the same processes (numbered in the
order they were started) at the same steps (rank 0's reported progress; a
log without steps: at the same times). The program must be an elastic
ddp program that prints examples/train's `--report-state` lines; ddp-chaos
passes nothing to it but the environment. At the end it checks the job:

  - every process ended: the victims by their signal, the rest with status 0,
    and no process is left in any of their process groups;
  - every member of a generation started it from the same step and state
    (parameters' hash), and no generation started before a step that rank 0
    had reported done (no committed step lost);
  - every member that finished holds the same parameters at the same step;
  - /dev/shm holds no ddp segment that this run's processes made;
  - resources, sampled every --sample-s: the store's key count, RSS,
    descriptors and threads and the segments, as slopes after the first
    quarter of the run; each member's RSS, descriptors and threads over its
    own life after its first minute.

Like ddprun, it makes a job secret (DDP_JOB_SECRET) for the store and every
process it starts, unless one is set.

It prints a summary (recovery time percentiles per kind of event, the slopes,
the final accuracy the program reported) and writes it to --summary as JSON.
Exit status: 0 when the job finished and every check held, 1 otherwise, 2 for
a usage error.
"""

import argparse
import json
import os
import random
import re
import select
import selectors
import signal
import subprocess
import sys
import time

FAILURES = ("kill", "stop", "formation-kill", "handover-kill")
KINDS = FAILURES + ("join",)
HANDOVER_POINT = "elastic.zero_handover.transfer"

STATE = re.compile(r"train: state (generation (\d+)|final): member (\d+) pid (\d+) step (\d+) "
                   r"parameters fnv1a64 ([0-9a-f]+)")
READY = re.compile(r"ddp: elastic: generation (\d+): \d+ member\(s\) \(([\d,]*)\), at step (\d+), "
                   r"ready")
DECIDED = re.compile(r"elastic: generation (\d+): world \d+ \(members ([\d, ]*)\); .*store keys (\d+)")
PROGRESS = re.compile(r"^epoch \d+/\d+ step (\d+) \|")
ACCURACY = re.compile(r"^final: held-out loss [\d.]+, accuracy ([\d.]+)%")
FAULT_FIRED = re.compile(r"ddp: fault point \S+: killing this process")


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="ddp-chaos", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="ddp-chaos [options] -- PROGRAM [ARGS...]")
    p.add_argument("--nproc", type=int, default=4, help="members at the start (default 4)")
    p.add_argument("--elastic", default="2:6", metavar="MIN:MAX",
                   help="the job's world size bounds; ddp-chaos keeps the running members "
                        "within them (default 2:6)")
    p.add_argument("--failures", type=int, default=20,
                   help="failures to inject (kill, stop, formation-kill, handover-kill; joins "
                        "come on top), then the job is left to finish (default 20)")
    p.add_argument("--kinds", default="kill,stop,join,formation-kill",
                   help="the events to draw from, comma-separated: " + ", ".join(KINDS) +
                        " (default kill,stop,join,formation-kill)")
    p.add_argument("--every", type=float, default=1.0,
                   help="mean seconds between the job's recovery and the next event; each gap "
                        "is drawn from [0.5, 1.5] times it (default 1)")
    p.add_argument("--every-steps", type=int, default=0,
                   help="and at least this many steps (reported by rank 0's progress lines) "
                        "between the job's recovery and the next event, so that a job of a "
                        "given length takes the same number of events at any speed (default 0)")
    p.add_argument("--stop-s", type=float, default=None,
                   help="how long a stopped member stays stopped; a stop shorter than the "
                        "job's collective timeout may be ridden out as a stall (default "
                        "$DDP_TIMEOUT + 1 where set, else 3)")
    p.add_argument("--seed", type=int, default=1, help="the schedule's seed (default 1)")
    p.add_argument("--replay", metavar="LOG", help="apply the events of an earlier --log instead")
    p.add_argument("--log", metavar="FILE", help="the events, one JSON line each (default none)")
    p.add_argument("--output", metavar="FILE",
                   help="every process's output, prefixed with the time and its process "
                        "(default none)")
    p.add_argument("--summary", metavar="FILE", help="the summary as JSON (default none)")
    p.add_argument("--sample-s", type=float, default=1.0,
                   help="seconds between resource samples (default 1)")
    p.add_argument("--recovery-timeout", type=float, default=60,
                   help="seconds the job may take to re-form after an event before ddp-chaos "
                        "stops it as stuck (default 60)")
    p.add_argument("--timeout", type=float, default=3600,
                   help="seconds the whole job may take (default 3600)")
    p.add_argument("--store", metavar="PATH",
                   help="ddp-store (default: beside ddp-chaos, or in ../ddprun of a build tree)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the program and its arguments")
    args = p.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        p.error("no program given (ddp-chaos [options] -- PROGRAM [ARGS...])")
    try:
        lo, hi = (int(x) for x in args.elastic.split(":"))
    except ValueError:
        p.error("--elastic expects MIN:MAX, got '%s'" % args.elastic)
    if not 1 <= lo <= args.nproc <= hi:
        p.error("--elastic %s must hold --nproc %d (1 <= MIN <= N <= MAX)" % (args.elastic,
                                                                           args.nproc))
    args.min_world, args.max_world = lo, hi
    args.kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in args.kinds if k not in KINDS]
    if unknown or not args.kinds:
        p.error("--kinds: '%s' is not among %s" % (",".join(unknown), ", ".join(KINDS)))
    if not any(k in FAILURES for k in args.kinds) and args.failures > 0:
        p.error("--kinds has no failure, but --failures is %d" % args.failures)
    if "handover-kill" in args.kinds and "--zero" not in args.command:
        p.error("--kinds handover-kill needs a ZeRO job (a program run with --zero): only a ZeRO "
                "handover passes the fault point")
    if lo == hi and "join" in args.kinds:
        p.error("--elastic %s leaves no room for a join" % args.elastic)
    if args.stop_s is None:
        timeout = os.environ.get("DDP_TIMEOUT", "")
        args.stop_s = float(timeout) + 1 if timeout.replace(".", "", 1).isdigit() else 3.0
    args.store = args.store or find_store()
    if not os.access(args.store, os.X_OK):
        p.error("ddp-store not found at %s (--store PATH)" % args.store)
    return args


def find_store():
    here = os.path.dirname(os.path.realpath(sys.argv[0]))
    for candidate in (os.path.join(here, "ddp-store"),
                      os.path.join(here, "..", "ddprun", "ddp-store")):
        if os.access(candidate, os.X_OK):
            return os.path.normpath(candidate)
    return os.path.join(here, "ddp-store")


def percentile(values, q):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100.0 * (len(ordered) - 1))))]


def slope(points):
    """Least-squares slope of (x, y) points; None with fewer than 3."""
    if len(points) < 3:
        return None
    n = float(len(points))
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def proc_sample(pid):
    """RSS (kB), open descriptors, threads of a live process; None if gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            status = f.read()
        fds = len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return None
    rss = re.search(r"VmRSS:\s+(\d+)", status)
    threads = re.search(r"Threads:\s+(\d+)", status)
    state = re.search(r"State:\s+(\S)", status)
    if not rss or (state and state.group(1) == "Z"):
        return None
    return {"rss_kb": int(rss.group(1)), "fds": fds, "threads": int(threads.group(1))}


def shm_segments():
    try:
        return sorted(n for n in os.listdir("/dev/shm") if n.startswith("ddp-"))
    except OSError:
        return []


class Process:
    """One process ddp-chaos started: the store (index -1) or a member."""

    def __init__(self, index, popen, kind):
        self.index, self.popen, self.kind = index, popen, kind
        self.pid = popen.pid
        self.member = None        # member id, from its first state line
        self.stopped = False
        self.cont_progress = None  # rank 0's last reported step when it was continued
        self.victim = None        # the signal ddp-chaos killed it with, or "fault point"
        self.status = None        # returncode once reaped
        self.generations = set()  # generations it reported a state for
        self.buffers = {}         # fd -> partial line


class Chaos:
    def __init__(self, args):
        self.a = args
        self.t0 = time.monotonic()
        self.rng = random.Random(args.seed)
        self.sel = selectors.DefaultSelector()
        self.procs = []
        self.store = None
        self.port = None
        self.problems = []
        self.events = []           # injected events, as logged
        self.recoveries = []       # {kind, seconds}
        self.pending = None        # the event the job is recovering from
        self.decided = {}          # generation -> when the store's line said it was decided
        self.ready = {}            # generation -> (time, members, step)
        self.states = {}           # generation -> {member: (step, hash)}
        self.progress_before = {}  # generation -> rank 0's last step reported before it started
        self.finals = {}           # member -> (step, hash)
        self.max_progress = -1
        self.progress_at_recovery = -1  # rank 0's step when the job recovered from the last event
        self.accuracy = None
        self.keys = []             # (t, generation, store keys)
        self.samples = []          # (t, {"store": sample, "shm": n, "members": {index: sample}})
        self.conts = []            # (time, process) due SIGCONTs
        self.form_kill_after = None  # formation-kill: kill once a generation after this is decided
        self.failures = 0
        self.finishing = None      # when a member ended well: the job is done
        self.finished = False      # finish() ran
        self.log = open(args.log, "w") if args.log else None
        self.out = open(args.output, "w") if args.output else None
        self.replay = self.read_replay(args.replay) if args.replay else None
        self.shm_before = shm_segments()

    # -- time and records ----------------------------------------------------

    def now(self):
        return time.monotonic() - self.t0

    def say(self, text):
        sys.stderr.write("ddp-chaos: %s\n" % text)
        sys.stderr.flush()

    def record(self, event, **fields):
        entry = dict(t=round(self.now(), 3), event=event, **fields)
        if event in KINDS:
            entry["progress"] = self.max_progress  # what --replay waits for
            self.events.append(entry)
        if self.log:
            self.log.write(json.dumps(entry) + "\n")
            self.log.flush()
        return entry

    @staticmethod
    def read_replay(path):
        """The events of a log; a formation-kill with the process it killed as its target."""
        with open(path) as f:
            entries = [json.loads(line) for line in f if line.strip()]
        events = []
        for e in entries:
            if e.get("event") in KINDS:
                events.append(e)
            elif e.get("event") == "formation-kill-fired" and events and \
                    events[-1]["event"] == "formation-kill":
                events[-1]["target"] = e["process"]
            elif e.get("event") == "formation-kill-skipped" and events and \
                    events[-1]["event"] == "formation-kill":
                events[-1]["target"] = None
        return events

    # -- processes -----------------------------------------------------------

    def spawn(self, kind, env_extra):
        env = dict(os.environ)
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "DDP_FAULT_POINT"):
            env.pop(name, None)
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(self.port),
                   WORLD_SIZE=str(self.a.nproc),
                   DDP_ELASTIC_MIN_WORLD_SIZE=str(self.a.min_world),
                   DDP_ELASTIC_MAX_WORLD_SIZE=str(self.a.max_world))
        env.setdefault("OMP_NUM_THREADS", "1")
        env.update(env_extra)
        index = len(self.procs)
        env.setdefault("LOCAL_RANK", str(index))
        popen = subprocess.Popen(self.a.command, env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True)
        p = Process(index, popen, kind)
        self.procs.append(p)
        self.watch(p)
        self.record("spawn", process=index, pid=p.pid, why=kind,
                    **({"fault_point": env_extra["DDP_FAULT_POINT"]}
                       if "DDP_FAULT_POINT" in env_extra else {}))
        return p

    def watch(self, p):
        for stream in (p.popen.stdout, p.popen.stderr):
            os.set_blocking(stream.fileno(), False)
            self.sel.register(stream, selectors.EVENT_READ, p)
            p.buffers[stream.fileno()] = b""

    def start_store(self):
        # As ddprun --elastic does: a job secret that the store and every process started here
        # share, unless one is given.
        if not os.environ.get("DDP_JOB_SECRET"):
            os.environ["DDP_JOB_SECRET"] = os.urandom(16).hex()
        popen = subprocess.Popen([self.a.store, "--host", "127.0.0.1", "--port", "0", "--report",
                                  "--report-as", "ddp-chaos"], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True)
        self.store = Process(-1, popen, "store")
        ready, _, _ = select.select([popen.stdout], [], [], 60)
        line = popen.stdout.readline().decode(errors="replace") if ready else ""
        m = re.match(r"ddp-store: listening on port (\d+)", line)
        if not m:
            popen.kill()
            raise SystemExit("ddp-chaos: %s did not start: %r" % (self.a.store, line))
        self.port = int(m.group(1))
        self.watch(self.store)
        self.record("store", pid=popen.pid, port=self.port)

    def alive(self):
        return [p for p in self.procs if p.status is None]

    def running(self):
        return [p for p in self.alive() if not p.stopped]

    def members_now(self):
        """Running processes that are members of a generation (they reported a state)."""
        return [p for p in self.running() if p.member is not None and p.victim is None]

    def signal(self, p, sig):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass

    def reap(self):
        for p in self.alive():
            code = p.popen.poll()
            if code is None:
                continue
            p.status = code
            self.drain(p)
            self.record("exit", process=p.index, pid=p.pid, member=p.member, status=code)
            if code == 0 and self.finishing is None:
                self.finishing = self.now()
                for q in self.alive():
                    if q.stopped:
                        self.cont(q)
            elif code != 0 and p.victim is None:
                self.problems.append("process %d (pid %d, member %s) ended with status %d without "
                                     "being failed by ddp-chaos" % (p.index, p.pid, p.member, code))

    def cont(self, p):
        if p.stopped and p.status is None:
            self.signal(p, signal.SIGCONT)
            p.stopped = False
            p.cont_progress = self.max_progress
            self.record("cont", process=p.index, pid=p.pid, member=p.member)

    # -- output --------------------------------------------------------------

    def pump(self, timeout):
        for key, _ in self.sel.select(timeout):
            self.read(key.data, key.fileobj)

    def read(self, p, stream):
        """One read of a process's pipe; False when nothing more is there now."""
        fd = stream.fileno()
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return False
        if not chunk:
            self.sel.unregister(stream)
            if p.buffers[fd]:
                self.line(p, p.buffers[fd].decode(errors="replace"))
            p.buffers[fd] = b""
            stream.close()  # a long run starts thousands of processes
            return False
        data = p.buffers[fd] + chunk
        *lines, p.buffers[fd] = data.split(b"\n")
        for line in lines:
            self.line(p, line.decode(errors="replace"))
        return True

    def drain(self, p):
        """What a process wrote before it ended, up to its pipes' ends (bounded)."""
        for stream in (p.popen.stdout, p.popen.stderr):
            for _ in range(256):
                watched = {key.fileobj for key in self.sel.get_map().values()}
                if stream.closed or stream not in watched or not self.read(p, stream):
                    break

    def line(self, p, text):
        t = self.now()
        if self.out:
            who = "store" if p.index < 0 else "p%d" % p.index
            self.out.write("%9.3f [%s] %s\n" % (t, who, text))
        m = DECIDED.search(text)
        if m and p.index < 0:
            g = int(m.group(1))
            members = [int(x) for x in m.group(2).replace(" ", "").split(",") if x]
            self.decided[g] = t
            self.keys.append((t, g, int(m.group(3))))
            if self.form_kill_after is not None and g > self.form_kill_after:
                self.form_kill_after = None
                self.formation_kill_now(g, members)
            return
        m = STATE.search(text)
        if m:
            member, pid, step, digest = int(m.group(3)), int(m.group(4)), int(m.group(5)), m.group(6)
            p.member = member
            if m.group(2) is None:
                self.finals[member] = (step, digest)
            else:
                g = int(m.group(2))
                p.generations.add(g)
                if g not in self.states:
                    # Rank 0's progress of this generation comes after its own state line,
                    # which comes no earlier than this first one: what rank 0 reported done
                    # before the generation started is what it read so far.
                    self.progress_before[g] = self.max_progress
                self.states.setdefault(g, {})[member] = (step, digest)
            return
        m = READY.search(text)
        if m:
            g = int(m.group(1))
            members = [int(x) for x in m.group(2).split(",") if x]
            self.ready[g] = (t, members, int(m.group(3)))
            return
        m = PROGRESS.search(text)
        if m:
            self.max_progress = max(self.max_progress, int(m.group(1)))
            return
        m = ACCURACY.search(text)
        if m:
            self.accuracy = float(m.group(1))
            return
        if FAULT_FIRED.search(text) and p.victim in (None, "armed"):
            p.victim = "fault point"
            self.record("fault-point-fired", process=p.index, pid=p.pid)
            if self.pending and self.pending.get("process") == p.index:
                self.pending["failed_at"] = t

    # -- the schedule --------------------------------------------------------

    def latest_generation(self):
        return max(self.decided) if self.decided else -1

    def quiescent(self):
        """The latest generation is ready, no process is stopped, and every process is in it.
        (An event drawn while a stopped member is away would meet a world that depends on
        when it comes back: a replay could not make it again.)"""
        g = self.latest_generation()
        if g < 0 or g not in self.ready:
            return False
        return all(not p.stopped and g in p.generations for p in self.alive())

    def recovered(self):
        """Whether the job re-formed after the pending event and every running process is in
        the new generation. The recovery time is from the failure (or the join) to the first
        generation decided after it, without the victim, ready to step."""
        e = self.pending
        if e is None:
            return True
        if "recovered_s" not in e:
            if e["event"] in FAILURES and "failed_at" not in e:
                return False  # a formation-kill or handover-kill that has not happened yet
            since = e.get("failed_at", e["t"])
            later = [g for g, (t, _, _) in self.ready.items()
                     if g in self.decided and self.decided[g] >= since]
            if e.get("victim_member") is not None and e["event"] != "stop":
                # (a stopped member may be back in time to be in the next generation)
                later = [g for g in later if e["victim_member"] not in self.ready[g][1]]
            if e["event"] == "join":
                joiner = self.procs[e["process"]].member
                later = [g for g in later if joiner is not None and joiner in self.ready[g][1]]
            if not later and e["event"] == "stop" and self.absorbed(e):
                e["absorbed"] = True  # back within the job's timeout: a stall, no re-formation
                e["recovered_s"] = round(self.now() - since, 4)
                self.recoveries.append({"kind": "stop-absorbed", "seconds": e["recovered_s"]})
            elif not later:
                return False
            else:
                first = min(later, key=lambda g: self.ready[g][0])
                e["recovered_s"] = round(self.ready[first][0] - since, 4)
                self.recoveries.append({"kind": e["event"], "seconds": e["recovered_s"],
                                        "generation": first})
        if not self.quiescent():
            return False
        self.pending = None
        self.progress_at_recovery = self.max_progress
        return True

    def absorbed(self, e):
        """A stopped member continued before anyone timed out: the job stepped on after the
        SIGCONT in the same generation."""
        p = self.procs[e["process"]]
        return (not p.stopped and p.cont_progress is not None and
                self.max_progress > p.cont_progress and self.latest_generation() == e["generation"])

    def draw(self):
        """The next event: (kind, fields) from the seed, within the world's bounds."""
        kinds = self.a.kinds
        kind = self.rng.choice(kinds)
        running, alive = len(self.running()), len(self.alive())
        if kind in FAILURES and running - 1 < self.a.min_world:
            kind = "join" if alive < self.a.max_world else None
        if kind in ("join", "formation-kill", "handover-kill") and alive + 1 > self.a.max_world:
            kind = "kill" if running - 1 >= self.a.min_world else None
        if kind == "formation-kill" and running < self.a.min_world:
            kind = "join"
        if kind is None:
            return None
        return kind

    def inject(self, kind, entry=None):
        """Makes one event happen; `entry`: the replayed log entry."""
        victims = self.members_now()
        if kind in ("kill", "stop"):
            if not victims:
                return False
            if entry is not None:
                chosen = [p for p in self.procs if p.index == entry["process"]]
                if not chosen or chosen[0].status is not None:
                    self.problems.append("replay: process %s is not there for %s at %.3f s"
                                         % (entry["process"], kind, entry["t"]))
                    return False
                p = chosen[0]
            else:
                p = self.rng.choice(victims)
            p.victim = kind
            self.signal(p, signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
            if kind == "stop":
                p.stopped = True
                self.conts.append((time.monotonic() + self.a.stop_s, p))
            e = self.record(kind, process=p.index, pid=p.pid, member=p.member)
            e["failed_at"], e["victim_member"] = e["t"], p.member
            e["generation"] = self.latest_generation()
            if kind == "stop":
                p.victim = None  # it comes back
        elif kind == "join":
            p = self.spawn("join", {})
            e = self.record("join", process=p.index, pid=p.pid)
        elif kind == "formation-kill":
            p = self.spawn("join", {})
            e = self.record(kind, process=p.index, pid=p.pid)
            if entry is not None and "target" in entry:
                e["target"] = entry["target"]
            self.form_kill_after = self.latest_generation()
        else:  # handover-kill
            point = int(entry["pass"]) if entry else self.rng.randint(1, self.a.min_world)
            p = self.spawn("join", {"DDP_FAULT_POINT": "%s:%d" % (HANDOVER_POINT, point)})
            p.victim = "armed"
            e = self.record(kind, process=p.index, pid=p.pid, **{"pass": point})
        self.pending = e
        if kind in FAILURES:
            self.failures += 1
        return True

    def formation_kill_now(self, g, members):
        candidates = [p for p in self.members_now() if p.member in members]
        replayed = self.pending.get("target", "none") if self.pending else "none"
        if not candidates or len(self.running()) - 1 < self.a.min_world or replayed is None:
            self.record("formation-kill-skipped", generation=g)
            if self.pending:
                self.pending["failed_at"] = self.now()
            return
        if replayed != "none":
            candidates = [p for p in candidates if p.index == replayed]
            if not candidates:
                self.problems.append("replay: process %s is not a member of generation %d for "
                                     "its formation-kill" % (replayed, g))
                self.pending["failed_at"] = self.now()
                return
        p = self.rng.choice(candidates)
        p.victim = "formation-kill"
        self.signal(p, signal.SIGKILL)
        self.record("formation-kill-fired", process=p.index, pid=p.pid, member=p.member,
                    generation=g)
        if self.pending:
            self.pending.update(failed_at=self.now(), victim_member=p.member, target=p.index)

    # -- resources -----------------------------------------------------------

    def sample(self):
        members = {}
        for p in self.alive():
            s = proc_sample(p.pid)
            if s:
                members[p.index] = s
        store = proc_sample(self.store.pid) if self.store else None
        self.samples.append((self.now(), {"store": store, "shm": len(shm_segments()),
                                          "members": members}))

    def slopes(self):
        """Per minute, after the first quarter of the run."""
        if not self.samples:
            return {}
        end = self.samples[-1][0]
        warm = end / 4.0
        late = [(t, s) for t, s in self.samples if t >= warm]
        out = {}
        for field in ("rss_kb", "fds", "threads"):
            pts = [(t / 60.0, s["store"][field]) for t, s in late if s["store"]]
            out["store_" + field + "_per_min"] = slope(pts)
        out["shm_segments_per_min"] = slope([(t / 60.0, s["shm"]) for t, s in late])
        keys = [(t / 60.0, k) for t, _, k in self.keys if t >= warm]
        out["store_keys_per_min"] = slope(keys)
        out["store_keys_max"] = max((k for _, _, k in self.keys), default=None)
        # Each member over its own life after its first minute (its own
        # warm-up), where that leaves at least a minute: a member lives until
        # it is failed, so few live through the run.
        lived = {}
        for t, s in self.samples:
            for index, m in s["members"].items():
                lived.setdefault(index, []).append((t / 60.0, m))
        long_lived = {}
        for index, pts in lived.items():
            settled = [(x, m) for x, m in pts if x - pts[0][0] >= 1.0]
            if settled and settled[-1][0] - settled[0][0] >= 1.0:
                long_lived[index] = settled
        for field in ("rss_kb", "fds", "threads"):
            per = sorted(v for v in (slope([(x, m[field]) for x, m in pts])
                                     for pts in long_lived.values()) if v is not None)
            out["member_" + field + "_per_min_median"] = per[len(per) // 2] if per else None
            out["member_" + field + "_per_min_max"] = per[-1] if per else None
        out["members_measured"] = len(long_lived)
        return out

    # -- the run -------------------------------------------------------------

    def run(self):
        self.start_store()
        for rank in range(self.a.nproc):
            self.spawn("initial", {"RANK": str(rank), "LOCAL_RANK": str(rank)})
        deadline = time.monotonic() + self.a.timeout
        next_sample = time.monotonic()
        next_event = None
        waiting_since = time.monotonic()
        replay = list(self.replay) if self.replay is not None else None
        planned = self.a.failures if replay is None else sum(
            1 for e in replay if e["event"] in FAILURES)
        while self.alive():
            self.pump(0.05)
            self.reap()
            now = time.monotonic()
            for due, p in [c for c in self.conts if c[0] <= now]:
                self.conts.remove((due, p))
                self.cont(p)
            if now >= next_sample:
                self.sample()
                next_sample = now + self.a.sample_s
            if now >= deadline:
                self.problems.append("the job ran past --timeout %g s; stopped" % self.a.timeout)
                break
            if self.finishing is not None:
                if self.now() - self.finishing > 60:
                    self.problems.append("processes still ran 60 s after the job finished")
                    break
                continue
            if self.pending is not None and not self.recovered():
                if now - waiting_since > self.a.recovery_timeout:
                    self.problems.append("the job did not re-form within %g s of %s"
                                         % (self.a.recovery_timeout, json.dumps(self.pending)))
                    break
                continue
            if (replay is None and self.failures >= planned) or replay == []:
                continue
            if not self.quiescent():
                continue
            if replay is not None and "progress" in replay[0]:
                # At the step the event was made at: the job's pace differs from run to run.
                if self.max_progress < replay[0]["progress"]:
                    continue
            else:
                if self.max_progress < max(self.progress_at_recovery, 0) + self.a.every_steps:
                    continue
                if next_event is None:
                    next_event = (self.t0 + replay[0]["t"] if replay is not None else
                                  now + self.a.every * self.rng.uniform(0.5, 1.5))
                if now < next_event:
                    continue
            entry = replay.pop(0) if replay is not None else None
            kind = entry["event"] if entry else self.draw()
            next_event = None
            if kind is not None and self.inject(kind, entry):
                waiting_since = time.monotonic()
        self.finish()

    def finish(self):
        """Every process ended (continued, then killed after 30 s), the store stopped, and
        nothing left in their process groups. Once."""
        if self.finished:
            return
        self.finished = True
        for p in self.alive():
            self.cont(p)
        end = time.monotonic() + 30
        while self.alive() and time.monotonic() < end:
            self.pump(0.05)
            self.reap()
        for p in self.alive():
            self.problems.append("process %d (pid %d) still ran at the end: killed" % (p.index, p.pid))
            self.signal(p, signal.SIGKILL)
            try:
                p.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.problems.append("process %d (pid %d) survived SIGKILL" % (p.index, p.pid))
            p.status = p.popen.returncode
        if self.store is None:
            return
        self.signal(self.store, signal.SIGTERM)
        try:
            self.store.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.signal(self.store, signal.SIGKILL)
            self.store.popen.wait(timeout=10)
        for p in self.procs + [self.store]:
            self.drain(p)
        time.sleep(0.2)
        for p in self.procs + [self.store]:
            try:
                os.killpg(p.pid, 0)
                self.problems.append("process group of process %d (pid %d) still has a process"
                                     % (p.index, p.pid))
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            except PermissionError:
                pass

    # -- the verdict ---------------------------------------------------------

    def check(self):
        problems = list(self.problems)
        for g in sorted(self.states):
            values = set(self.states[g].values())
            if len(values) > 1:
                problems.append("generation %d: members started from different states: %s"
                                % (g, self.states[g]))
            steps = {step for step, _ in values}
            if steps and min(steps) < self.progress_before.get(g, -1):
                problems.append("generation %d started at step %d, but rank 0 had reported step "
                                "%d done before: a committed step was lost"
                                % (g, min(steps), self.progress_before[g]))
        finals = set(self.finals.values())
        if not finals:
            problems.append("no member reported a final state (did the job finish?)")
        elif len(finals) > 1:
            problems.append("the members finished with different states: %s" % self.finals)
        elif next(iter(finals))[0] < self.max_progress:
            problems.append("the final step %d is before step %d that rank 0 reported"
                            % (next(iter(finals))[0], self.max_progress))
        if len(self.finals) < self.a.min_world and finals:
            problems.append("%d member(s) finished, fewer than the minimum %d"
                            % (len(self.finals), self.a.min_world))
        injected = sum(1 for e in self.events if e["event"] in FAILURES)
        if injected < (self.a.failures if self.replay is None else
                       sum(1 for e in self.replay if e["event"] in FAILURES)):
            problems.append("the job finished after %d failure(s), before all were injected: "
                            "give it more steps" % injected)
        for p in self.procs:
            if p.victim in ("kill", "formation-kill", "fault point") and p.status != -signal.SIGKILL:
                problems.append("process %d (pid %d), killed as %s, ended with status %s"
                                % (p.index, p.pid, p.victim, p.status))
            elif p.victim == "armed" and p.status != 0:
                problems.append("process %d (pid %d), armed to die in a ZeRO handover, ended with "
                                "status %s without its fault point firing" % (p.index, p.pid,
                                                                             p.status))
        ours = {str(p.pid) for p in self.procs}
        creator = re.compile(r"ddp-shm-(\d+)-")  # other jobs' segments are theirs to check
        leftover = sorted(n for n in set(shm_segments()) - set(self.shm_before)
                          if creator.match(n) and creator.match(n).group(1) in ours)
        if leftover:
            problems.append("/dev/shm holds %d ddp segment(s) that were not there before: %s"
                            % (len(leftover), ", ".join(leftover[:5])))
        return problems

    def summary(self, problems):
        kinds = {}
        for r in self.recoveries:
            kinds.setdefault(r["kind"], []).append(r["seconds"])
        failures = [r["seconds"] for r in self.recoveries if r["kind"] in FAILURES]

        def stats(values):
            return {"count": len(values), "p50_s": percentile(values, 50),
                    "p99_s": percentile(values, 99), "max_s": max(values) if values else None}

        counts = {}
        for e in self.events:
            counts[e["event"]] = counts.get(e["event"], 0) + 1
        return {
            "seed": self.a.seed, "command": self.a.command, "elapsed_s": round(self.now(), 1),
            "events": counts, "failures": sum(counts.get(k, 0) for k in FAILURES),
            "generations": len(self.decided), "processes": len(self.procs),
            "recovery": {"failures": stats(failures), **{k: stats(v) for k, v in kinds.items()}},
            "final": {"members": len(self.finals),
                      "step": next(iter(self.finals.values()))[0] if self.finals else None,
                      "accuracy_pct": self.accuracy},
            "slopes": self.slopes(), "problems": problems, "ok": not problems,
        }


def show(summary):
    r = summary["recovery"]
    lines = ["ddp-chaos: %d failure(s) %s, %d generation(s), %d process(es), %.1f s"
             % (summary["failures"], summary["events"], summary["generations"],
                summary["processes"], summary["elapsed_s"])]
    for kind in ["failures"] + sorted(k for k in r if k != "failures"):
        s = r.get(kind)
        if s and s["count"]:
            lines.append("ddp-chaos: recovery %-15s n=%-5d p50 %.3f s  p99 %.3f s  max %.3f s"
                         % (kind, s["count"], s["p50_s"], s["p99_s"], s["max_s"]))
    f = summary["final"]
    lines.append("ddp-chaos: final: %s member(s) at step %s, accuracy %s%%"
                 % (f["members"], f["step"], f["accuracy_pct"]))
    lines.append("ddp-chaos: slopes per minute after warm-up: " + ", ".join(
        "%s %s" % (k, "%.3g" % v if isinstance(v, float) else v)
        for k, v in summary["slopes"].items()))
    for p in summary["problems"]:
        lines.append("ddp-chaos: FAILED: " + p)
    lines.append("ddp-chaos: %s" % ("every check held" if summary["ok"] else "the job failed"))
    sys.stderr.write("\n".join(lines) + "\n")


def main(argv):
    args = parse_args(argv)
    chaos = Chaos(args)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        chaos.run()
    except KeyboardInterrupt:
        chaos.problems.append("ddp-chaos was interrupted")
    except Exception as e:  # noqa: BLE001 -- whatever it was, nothing is left running
        chaos.problems.append("ddp-chaos failed: %s: %s" % (type(e).__name__, e))
    finally:
        chaos.finish()
    summary = chaos.summary(chaos.check())
    if args.summary:
        with open(args.summary, "w") as f:
            json.dump(summary, f, indent=1)
    show(summary)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
