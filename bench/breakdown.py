#!/usr/bin/env python3
"""Where one `lockrun -- true` spends its time, step by step.

Run through bench/breakdown.sh, which builds lockrun first; or directly:

    python3 bench/breakdown.py --lockrun target/release/lockrun [--runs 30]
    python3 bench/breakdown.py --lockrun old/lockrun --lockrun new/lockrun  # side by side

Starts a throwaway redis-server on a unix socket in a temporary directory
and on a free loopback TCP port (never the Redis on 6379), runs
`lockrun --redis unix://... --key K -- true` and reports, as Markdown tables:

1. steps: perf trace (no ptrace stops: the traced processes run on), on
   a dozen system calls that mark the steps; perf itself competes for the
   CPU, so each step is longer than untraced ("wall" below is untraced):
     exec            execve of lockrun, in the kernel
     loader          execve returned -> Rust's runtime starts (the poll()
                     on fds 0-2 that std makes first): ld.so and libc
                     start-up
     std + args      -> the async runtime is built (epoll_create1): std's
                     own start-up, argument parsing, settings
     runtime         -> the Redis socket is opened: runtime, signal
                     handlers, token
     connect         -> the first command is written to Redis
     acquire         -> its reply is read
     to fork         -> lockrun forks the command: std's spawn (fork, or
                     clone without CLONE_VM; an older build's vfork)
     fork, pre_exec  -> the child's first execve: the fork, std's set-up
                     of the child, lockrun's pre_exec
     command's exec  -> its execve succeeded: the PATH search's execve
                     calls that fail, then the kernel's exec
     child runs      -> the command (`true`) exits
     exit noticed    -> lockrun reaps it (wait4/waitid)
     release         -> the release is written, and -> its reply is read
     exit            -> lockrun's exit_group
   and one figure beside them, not a step between two others (lockrun and
   its child run at once after the fork):
     fork -> spawn returns   how long the spawn holds lockrun: until std
                     reads EOF from its error pipe, which the command's
                     exec closes (a vfork returns at the exec by itself)
2. wall, CPU time and page faults per run, untraced: perf stat (software
   counters), lockrun alone (--no-inherit) and with its child;
3. the floor under any Redis lock on this machine: a request's round trip,
   and redis-server's CPU time per client session of two requests (connect,
   acquire, release, close), for a PING and for a script that only returns,
   over TCP and the unix socket, with Redis idle before each request (as a
   run finds it) and back to back; beside redis-server's CPU time per run of
   `lockrun -- true`, whose difference is what lockrun's scripts cost;
4. instructions per run of lockrun alone (its child not counted):
   `perf stat -e instructions:u` where the CPU exposes it, else valgrind's
   callgrind (deterministic to a few hundred instructions, so that changes
   of 1 % show through the noise of a shared machine).
"""

import argparse
import collections
import os
import random
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TRACED = ("execve,poll,epoll_create1,socket,connect,write,writev,sendto,"
          "recvfrom,read,clone,clone3,fork,vfork,wait4,waitid,exit_group")
# perf trace's lines: "START ( DURATION ms): COMM/PID CALL(ARGS) = RET", or
# "... [continued]: CALL()) = RET" for a call other lines cut in two; START
# is "?" for a return perf saw no entry for (a child's first return from
# fork, clone or vfork, or a return perf took before its entry).
LINE = re.compile(r"^\s*([\d.]+|\?) \(\s*(?:([\d.]+) ms)?\s*\): (\S+)/(\d+) (.*)$")
CALL = re.compile(r"^\s*(\.\.\. \[continued\]: )?(\w+)\((.*)\)\s+=\s*(\S*)")
# A call's first half, "CALL(ARGS) ...": its args, which the other half lacks.
UNFINISHED = re.compile(r"^\s*(\w+)\((.*)\)\s*\.\.\.$")
FD = re.compile(r"^fd: (\d+)")
LOST = re.compile(r"LOST (\d+) events")
# The calls that start a process or thread: std's spawn forks with fork
# (musl on x86_64) or clone without CLONE_VM (glibc); threads and an older
# lockrun's spawn use clone, clone3 or vfork.
CLONES = ("clone", "clone3", "fork", "vfork")
# wait4's and waitid's options as perf trace prints them: the flags it has
# names for, the others in hex (WEXITED, WNOWAIT).
WAIT_FLAGS = {"NOHANG": 0x1, "UNTRACED": 0x2, "CONTINUED": 0x8}
WEXITED, WNOWAIT = 0x4, 0x1000000
P_ALL, P_PID, P_PGID, P_PIDFD = 0, 1, 2, 3
IDTYPES = {"P_ALL": P_ALL, "P_PID": P_PID, "P_PGID": P_PGID, "P_PIDFD": P_PIDFD}
# The floor's rounds, and each case's sessions per round.
FLOOR_ROUNDS = 6
FLOOR_SESSIONS = 50


def free_port():
    """A loopback TCP port that nothing listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(work):
    """A throwaway redis-server on a unix socket in `work` and on a free
    loopback TCP port (for the floor's TCP rows); returns it, the socket's
    path and the port."""
    sock = os.path.join(work, "redis.sock")
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
         "--unixsocket", sock, "--unixsocketperm", "700",
         "--save", "", "--appendonly", "no", "--dir", work],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(sock)
            s.sendall(b"PING\r\n")
            if s.recv(16).startswith(b"+PONG"):
                return proc, sock, port
        except OSError:
            pass
        time.sleep(0.05)
    proc.kill()
    sys.exit("breakdown: redis-server did not start")


class Incomplete(Exception):
    """A trace that lacks a mark, or whose marks are out of order: perf lost
    or mangled an event, or the run failed. The message says which mark."""


def sorts_events():
    """Whether this perf trace has --sort-events."""
    if not hasattr(sorts_events, "known"):
        usage = subprocess.run(["perf", "trace", "-h"], capture_output=True, text=True)
        sorts_events.known = "--sort-events" in usage.stdout + usage.stderr
    return sorts_events.known


def perf_trace(events, out):
    """perf trace's command line for `events`, written to `out`, up to "--".

    --sort-events: perf reads each CPU's buffer in turn, and on a busy
    machine it can take a call's return before its entry, or a process's
    calls before its fork: it then prints the return with no time ("? ( ):
    sh/PID ... [continued]: wait4()) = CHILD", under a stale name) or with
    the time of the call before it, and a mark goes missing or moves."""
    return (["perf", "trace"] + (["--sort-events"] if sorts_events() else [])
            + ["-e", events, "-o", out, "--"])


def child_of(e):
    """The pid a call of CLONES returned (its child), or None."""
    return int(e[5]) if e[5].isdigit() and e[5] != "0" else None


def wait_args(e):
    """A wait4's or waitid's arguments as perf prints them, each its first word."""
    return {k: v.split()[0] for k, v in re.findall(r"(\w+): ([^,]+)", e[4])}


def reaps(e, child):
    """Whether call `e` reaped process `child`, as far as its line tells: a
    wait4 that returned the child's pid, or a waitid that succeeded (it
    returns 0, which perf prints as nothing) and waited for exits (WEXITED,
    and not WNOWAIT, a peek that leaves the zombie) of the child (P_PID),
    its process group (P_PGID: the command leads its own), any child
    (P_ALL: perf leaves out its zero idtype) or a pidfd (P_PIDFD: which
    process the fd is, the line does not say)."""
    if e[3] == "wait4":
        return e[5] == str(child)
    if e[3] != "waitid" or e[5] not in ("", "0"):
        return False
    args = wait_args(e)
    options = 0
    for word in args.get("options", "0").split("|"):
        options |= int(word, 0) if word[:1].isdigit() else WAIT_FLAGS.get(word, 0)
    if not options & WEXITED or options & WNOWAIT:
        return False
    which = args.get("which", "0")
    which = IDTYPES.get(which, int(which) if which.isdigit() else -1)
    if which in (P_PID, P_PGID):
        return args.get("upid") == str(child)
    return which in (P_ALL, P_PIDFD)


class Trace:
    """One perf trace file's finished calls.

    `calls`, by start: (tid, start, end, name, args, ret, comm); `untimed`,
    the returns perf printed without a time, (tid, None, None, ...) alike;
    `lost`, the events perf said it lost. A process is told by what its
    calls do, not by their order or its name: the command's spawn is the
    fork or clone whose child calls execve (a thread never does), and a
    thread's calls count as its process's."""

    def __init__(self, path):
        self.calls, self.untimed, self.lost = [], [], 0
        unfinished = {}  # tid: (call, args) of its call cut in two
        with open(path) as f:
            for raw in f:
                lost = LOST.search(raw)
                if lost:
                    self.lost += int(lost.group(1))
                    continue
                m = LINE.match(raw.rstrip())
                if not m:
                    continue
                tid = int(m.group(4))
                u = UNFINISHED.match(m.group(5))
                if u:
                    unfinished[tid] = u.groups()
                    continue
                c = CALL.match(m.group(5))
                if not c:
                    continue
                name, args = c.group(2), c.group(3)
                if c.group(1):  # the second half: the args are the first's
                    first_half = unfinished.pop(tid, None)
                    args = first_half[1] if first_half and first_half[0] == name else ""
                call = (name, args, c.group(4), m.group(3))
                if m.group(1) == "?":
                    self.untimed.append((tid, None, None) + call)
                else:
                    start = float(m.group(1))
                    self.calls.append((tid, start, start + float(m.group(2) or 0)) + call)
        self.calls.sort(key=lambda e: e[1])
        every = self.calls + self.untimed
        self.execs = {e[0] for e in every if e[3] == "execve"}
        # A child that never calls execve is a thread of the caller's (or a
        # fork that runs the caller's code): its calls are the caller's.
        self.parent = {child_of(e): e[0] for e in every
                       if e[3] in CLONES and child_of(e) and child_of(e) not in self.execs}

    def process(self, tid):
        """The process thread `tid` belongs to."""
        seen = set()
        while tid in self.parent and tid not in seen:
            seen.add(tid)
            tid = self.parent[tid]
        return tid

    def of(self, pid):
        """The calls of process `pid` and its threads."""
        return [e for e in self.calls if self.process(e[0]) == pid]

    def missing(self, what, pred):
        """Incomplete, for a mark `what` that no timed call `pred` holds for gives."""
        if any(pred(e) for e in self.untimed):
            what += ": perf printed its return without a time"
        elif self.lost:
            what += f" (perf lost {self.lost} events)"
        return Incomplete(what)

    def first(self, pred, what, t=float("-inf"), among=None):
        """The first call, by start, from `t` on that `pred` holds for."""
        for e in self.calls if among is None else among:
            if e[1] >= t and pred(e):
                return e
        raise self.missing(f"no {what}", pred)

    def returned(self, pred, what, t):
        """The first call to return from `t` on that `pred` holds for (a
        blocking call's line carries the time it was made: by its return)."""
        done = [e for e in self.calls if e[2] >= t and pred(e)]
        if not done:
            raise self.missing(f"no {what}", pred)
        return min(done, key=lambda e: e[2])

    def spawn(self, pid, what, t=float("-inf")):
        """The first call of CLONES by process `pid` from `t` on whose child
        calls execve: a command's spawn, not a thread's start."""
        return self.first(lambda e: e[3] in CLONES and self.process(e[0]) == pid
                          and child_of(e) in self.execs, what, t)

    def spawn_returned(self, spawn, before):
        """When the spawn `spawn` gives its caller back: std's spawn reads
        its error pipe until the command's exec closes it (a read that
        returns 0, in the thread that forked, before `before`); a vfork
        returns at the exec by itself, and has no such read."""
        eof = [e[2] for e in self.calls if e[0] == spawn[0] and e[3] in ("read", "recvfrom")
               and e[5] == "0" and e[1] >= spawn[1] and e[2] <= before]
        return max([spawn[2]] + eof[:1])

    def reaping(self, pid, child, t, what):
        """The call by process `pid` that reaped `child`, which exited at `t`."""
        return self.returned(lambda e: self.process(e[0]) == pid and reaps(e, child), what, t)

    def ran(self, child, what, t=float("-inf")):
        """`child`'s execve that succeeded: the command runs from its end."""
        return self.first(lambda e: e[0] == child and e[3] == "execve" and e[5] == "0", what, t)

    def exited(self, pid, what, t=float("-inf")):
        """Process `pid`'s exit_group (its line carries the time it was made)."""
        return self.first(lambda e: e[0] == pid and e[3] == "exit_group", what, t)

    def sockets(self, pid):
        """The fds process `pid` connected (to Redis)."""
        return {m.group(1) for e in self.of(pid) if e[3] == "connect"
                for m in [FD.match(e[4])] if m}


def in_order(marks):
    """`marks`, checked to come one after the other; in ms since the first."""
    names = list(marks)
    for here, there in zip(names, names[1:]):
        if marks[there] < marks[here]:
            raise Incomplete(f"marks out of order: {there!r} before {here!r} "
                             "(perf printed a call with another's time)")
    return {k: v - marks[names[0]] for k, v in marks.items()}


def parse_trace(path, lockrun):
    """The step marks of one traced run, in ms since lockrun's execve, and
    how long its spawn held lockrun (fork -> spawn returns), in ms."""
    trace = Trace(path)
    name = os.path.basename(lockrun)[:15]
    first = trace.first(lambda e: e[3] == "execve" and e[5] == "0" and e[6] == name,
                        f"execve of {name} that succeeded")
    me = first[0]
    mine = trace.of(me)

    def after(t, pred, what):
        return trace.first(pred, what, t, mine)

    marks = {"exec": first[1], "loader": first[2]}
    marks["std + args"] = after(first[2], lambda e: e[3] == "poll", "poll (std's start)")[1]
    marks["runtime"] = after(first[2], lambda e: e[3] == "epoll_create1", "epoll_create1")[1]
    marks["connect"] = after(marks["runtime"], lambda e: e[3] == "socket", "socket")[1]
    connect = after(marks["connect"], lambda e: e[3] == "connect" and FD.match(e[4]), "connect")
    fd = FD.match(connect[4]).group(1)

    def on_redis(e):
        m = FD.match(e[4])
        return m is not None and m.group(1) == fd

    def sent(e):
        return e[3] in ("writev", "write", "sendto") and on_redis(e)

    def read(e):
        return e[3] in ("recvfrom", "read") and on_redis(e) and e[5] not in ("", "?", "-1", "0")

    marks["acquire"] = after(connect[1], sent, "acquire written to Redis")[1]
    marks["to fork"] = after(marks["acquire"], read, "acquire's reply read")[1]
    spawn = trace.spawn(me, "fork of the command (a fork or clone whose child calls execve)",
                        marks["to fork"])
    child = child_of(spawn)
    marks["fork, pre_exec"] = spawn[1]
    marks["command's exec"] = trace.first(lambda e: e[0] == child and e[3] == "execve",
                                          "execve by the command", spawn[1])[1]
    marks["child runs"] = trace.ran(child, "execve of the command that succeeded", spawn[1])[2]
    marks["exit noticed"] = trace.exited(child, "exit_group of the command",
                                         marks["child runs"])[1]
    marks["release"] = trace.reaping(me, child, marks["exit noticed"],
                                     "reaping of the command (wait4 or waitid)")[2]
    marks["exit"] = after(after(marks["release"], sent, "release written to Redis")[1], read,
                          "release's reply read")[1]
    marks["end"] = after(marks["exit"], lambda e: e[3] == "exit_group", "lockrun's exit_group")[1]
    held = trace.spawn_returned(spawn, marks["release"]) - spawn[1]
    return in_order(marks), held


def why_unread(reasons):
    """Why traces could not be read: each reason, with how many times."""
    return "; ".join(f"{reason} ({n})" for reason, n in reasons.most_common())


def lockrun_true(binary, sock, key="breakdown"):
    return [binary, "--redis", "unix://" + sock, "--key", key, "--", "true"]


def steps(args, sock, work):
    """The median of each step, per binary: {binary: [(step, starts at, takes)]}, or None."""
    trace = os.path.join(work, "trace")
    runs = {b: [] for b in args.lockrun}
    reasons = collections.Counter()
    for i in range(args.runs):
        for binary in args.lockrun:  # interleaved, so that load slows each alike
            cmd = perf_trace(TRACED, trace) + ["env"]
            done = subprocess.run(cmd + lockrun_true(binary, sock, f"breakdown-{i}"),
                                  stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if done.returncode != 0:
                print(f"steps: perf trace failed (it needs root, or kernel.perf_event_paranoid=-1 "
                      f"and tracefs): {done.stderr.strip()[:200]}\n")
                return None
            try:
                runs[binary].append(parse_trace(trace, binary))
            except Incomplete as why:  # a mark missing: perf lost events, or the run failed
                reasons[str(why)] += 1
                if args.keep:
                    shutil.copy(trace, os.path.join(args.keep, f"unread-{i}-{os.path.basename(binary)}"))

    table = {}
    for binary, traced in runs.items():
        if not traced:
            print(f"steps: no trace of {binary} could be read: {why_unread(reasons)}\n")
            return None
        marks = [m for m, _ in traced]
        names = list(marks[0])
        table[binary] = [(here, statistics.median(r[here] for r in marks),
                          statistics.median(r[there] - r[here] for r in marks))
                         for here, there in zip(names, names[1:])]
        forked = statistics.median(r["fork, pre_exec"] for r in marks)
        table[binary].append(("(fork -> spawn returns)", forked,
                              statistics.median(held for _, held in traced)))
        table[binary].append(("(traced total)", 0.0, statistics.median(r["end"] for r in marks)))
    if reasons:
        print(f"({sum(reasons.values())} of the traces could not be read, and are left out: "
              f"{why_unread(reasons)})\n")
    return table


# A hand-off's steps, by the mark each starts at.
HANDOFF_STEPS = {
    "command exits": "holder's command exits -> reaped",
    "exit noticed": "-> lets go (lockrun: release written; flock: exits)",
    "lock let go": "-> waiter has it (lockrun: grant read; flock: flock() returns)",
    "waiter has it": "-> waiter forks its command",
    "fork": "-> the command's execve done",
}


def parse_handoff(path, tool):
    """The marks of one traced hand-off, in ms since the holder's command exited.

    The holder's command exits; the holder reaps it (wait4/waitid); it lets
    go of the lock (lockrun: writes the release to Redis; flock: exits, and
    the kernel drops the lock with its file); the waiter learns it has the
    lock (lockrun: reads the grant from Redis; flock: its flock() returns);
    it forks its command, whose execve succeeds. Raises Incomplete, saying
    which mark it lacks, for a trace that does not have them all.
    """
    trace = Trace(path)
    # The two runs of the tool, holder first, told by the first call each
    # makes for the lock (perf trace does not always follow a name across
    # an exec): lockrun opens a socket to Redis, flock calls flock().
    signature = "flock" if tool == "flock" else "socket"
    holder = trace.process(trace.first(lambda e: e[3] == signature,
                                       f"{signature}() by the holder")[0])
    waiter = trace.process(trace.first(lambda e: e[3] == signature
                                       and trace.process(e[0]) != holder,
                                       f"{signature}() by the waiter")[0])

    def by(pid, names):
        return lambda e: e[3] in names and trace.process(e[0]) == pid

    spawn = trace.spawn(holder, "fork of the holder's command (a fork or clone whose child "
                                "calls execve)")
    child = child_of(spawn)
    marks = {"command exits": trace.exited(child, "exit_group of the holder's command")[1]}
    marks["exit noticed"] = trace.reaping(holder, child, marks["command exits"],
                                          "reaping of the holder's command (wait4 or waitid)")[2]
    if tool == "flock":
        marks["lock let go"] = trace.first(by(holder, ("exit_group",)), "holder's exit_group",
                                           marks["exit noticed"])[1]
        took = by(waiter, ("flock",))
        marks["waiter has it"] = trace.returned(lambda e: took(e) and e[5] in ("0", ""),
                                                "flock() by the waiter that returned",
                                                marks["lock let go"])[2]
    else:
        mine, theirs = trace.sockets(holder), trace.sockets(waiter)
        sent = by(holder, ("writev", "write", "sendto"))
        marks["lock let go"] = trace.first(lambda e: sent(e) and FD.match(e[4])
                                           and FD.match(e[4]).group(1) in mine,
                                           "release written to Redis by the holder",
                                           marks["exit noticed"])[1]
        read = by(waiter, ("recvfrom", "read"))
        marks["waiter has it"] = trace.returned(lambda e: read(e) and FD.match(e[4])
                                                and FD.match(e[4]).group(1) in theirs
                                                and e[5] not in ("", "?", "-1", "0"),
                                                "read from Redis by the waiter",
                                                marks["lock let go"])[2]
    fork = trace.spawn(waiter, "fork of the waiter's command (a fork or clone whose child "
                               "calls execve)")
    marks["fork"] = fork[1]
    marks["end"] = trace.ran(child_of(fork), "execve of the waiter's command that succeeded")[2]
    return in_order(marks)


def handoffs(args, sock, work):
    """The median of each step of a hand-off, for lockrun and flock: {tool: [(step, takes)]}, or None."""
    trace = os.path.join(work, "handoff-trace")
    lockfile = os.path.join(work, "flock")
    binary = args.lockrun[0]
    runs = {"lockrun": [], "flock": []}
    reasons = {tool: collections.Counter() for tool in runs}
    for i in range(args.runs):
        key = f"handoff-{i}"
        tools = {
            "lockrun": ([binary, "--redis", "unix://" + sock, "--key", key, "--", "sleep", "0.15"],
                        [binary, "--redis", "unix://" + sock, "--key", key, "--wait", "forever",
                         "--", "true"]),
            "flock": (["flock", lockfile, "sleep", "0.15"], ["flock", lockfile, "true"]),
        }
        for tool, (holder, waiter) in tools.items():
            # The waiter starts once the holder has had 50 ms to take the lock.
            script = f"{shlex.join(holder)} & sleep 0.05; {shlex.join(waiter)}; wait"
            done = subprocess.run(perf_trace(TRACED + ",flock", trace) + ["sh", "-c", script],
                                  stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            try:
                if done.returncode != 0:
                    raise Incomplete(f"perf trace or the run failed: "
                                     f"{(done.stderr.strip().splitlines() or ['?'])[-1][:100]}")
                runs[tool].append(parse_handoff(trace, tool))
            except Incomplete as why:
                reasons[tool][f"{tool}: {why}"] += 1
                if args.keep and os.path.exists(trace):
                    shutil.copy(trace, os.path.join(args.keep, f"unread-handoff-{i}-{tool}"))
    table = {}
    for tool, marks in runs.items():
        if not marks:
            print(f"hand-off: no trace of {tool} could be read: {why_unread(reasons[tool])}\n")
            return None
        names = list(marks[0])
        table[tool] = [(here, statistics.median(r[there] - r[here] for r in marks))
                       for here, there in zip(names, names[1:])]
        table[tool].append(("(traced gap)", statistics.median(r["end"] for r in marks)))
    unread = reasons["lockrun"] + reasons["flock"]
    if unread:
        print(f"({sum(unread.values())} of the hand-off traces could not be read, and are left "
              f"out: {why_unread(unread)})\n")
    return table


def redis_cpu(sock):
    """redis-server's CPU time so far (user + system), in ms."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.sendall(b"INFO cpu\r\n")
    reply = b""
    while b"used_cpu_user:" not in reply or not reply.endswith(b"\r\n"):
        reply += s.recv(4096)
    s.close()
    fields = dict(line.split(":", 1) for line in reply.decode().splitlines() if ":" in line)
    return (float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])) * 1000


def contended_cpu(args, sock, work, contenders=8, each=25):
    """CPU time per acquisition when `contenders` loops of `each` runs of
    `true` contend for one lock: the tool's processes and their commands
    (perf stat over the whole process tree), and redis-server's own."""
    lockfile = os.path.join(work, "contended")
    tools = {
        "lockrun": [args.lockrun[0], "--redis", "unix://" + sock, "--key", "contended",
                    "--wait", "forever", "--", "true"],
        "flock": ["flock", lockfile, "true"],
    }
    per = {}
    for tool, argv in tools.items():
        loop = f"for i in $(seq {each}); do {shlex.join(argv)} || exit 1; done"
        script = " & ".join([f"({loop})"] * contenders) + "; wait"
        before = redis_cpu(sock)
        t = time.perf_counter()
        out = subprocess.run(["perf", "stat", "-x", ",", "-e", "task-clock", "--", "sh", "-c", script],
                             capture_output=True, text=True, stdin=subprocess.DEVNULL)
        took = time.perf_counter() - t
        redis = redis_cpu(sock) - before
        clock = next(float(line.split(",")[0]) for line in out.stderr.splitlines()
                     if "task-clock" in line and line[:1].isdigit())
        n = contenders * each
        per[tool] = (clock / n, redis / n if tool == "lockrun" else 0.0, n / took)
    return per


def connected(address):
    """A connection to Redis at a unix socket's path or a TCP port."""
    if isinstance(address, int):
        s = socket.create_connection(("127.0.0.1", address))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s
    s = socket.socket(socket.AF_UNIX)
    s.connect(address)
    return s


def session(address, request, idle):
    """One client's session, as a run of a Redis lock has one: connect, send
    `request` twice, one at a time, with `idle` s before each (and before
    connecting), close. Returns the first round trip's wall time, in us."""
    time.sleep(idle)
    s = connected(address)
    first = None
    for _ in range(2):
        time.sleep(idle)
        t = time.perf_counter_ns()
        s.sendall(request)
        s.recv(64)
        # The first is the one a run's acquire makes, on a new connection.
        first = first or (time.perf_counter_ns() - t) / 1000
    s.close()
    return first


def resp(*words):
    """`words` as one request in Redis's protocol."""
    return b"".join([b"*%d\r\n" % len(words)]
                    + [b"$%d\r\n%s\r\n" % (len(w), w) for w in words])


def floor(args, sock, port, rounds=FLOOR_ROUNDS, sessions=FLOOR_SESSIONS):
    """What any client of this Redis pays, whatever its requests do: a
    request's round trip, and redis-server's CPU time per session of two
    requests (a lock's acquire and release), with Redis idle 2 ms before
    each request, as a run finds it (a process starts, a command runs), and
    back to back; for a PING and for a script that only returns, over TCP
    and the unix socket. Against them, redis-server's CPU time per run of
    `lockrun -- true`. Each case runs `sessions` times per round, the cases
    of a round in a random order; the medians of the rounds are returned."""
    script = b"return 1"
    s = connected(sock)
    s.sendall(resp(b"SCRIPT", b"LOAD", script))
    sha = s.recv(128).split(b"\r\n")[1]
    s.close()
    requests = {"PING": resp(b"PING"),
                "EVALSHA of a script that only returns": resp(b"EVALSHA", sha, b"0")}
    cases = [(transport, address, name, request, idle)
             for transport, address in (("TCP", port), ("unix", sock))
             for name, request in requests.items()
             for idle in (0.002, 0.0)]
    runs = {"TCP": f"redis://127.0.0.1:{port}", "unix": "unix://" + sock}
    trips, cpu = {}, {}
    for _ in range(rounds):
        for case in random.sample(cases + list(runs), len(cases) + len(runs)):
            before = redis_cpu(sock)
            if case in runs:
                for _ in range(args.runs):
                    subprocess.run([args.lockrun[0], "--redis", runs[case], "--key", "floor",
                                    "--", "true"], check=True, stdin=subprocess.DEVNULL)
                cpu.setdefault(case, []).append((redis_cpu(sock) - before) * 1000 / args.runs)
                continue
            transport, address, name, request, idle = case
            took = [session(address, request, idle) for _ in range(sessions)]
            key = (transport, name, idle)
            trips.setdefault(key, []).append(statistics.median(took))
            cpu.setdefault(key, []).append((redis_cpu(sock) - before) * 1000 / sessions)
    rows = {}
    for transport in runs:
        for name in requests:
            rows[f"{transport}: {name}"] = [
                statistics.median(figures[(transport, name, idle)])
                for idle in (0.002, 0.0) for figures in (trips, cpu)]
        rows[f"{transport}: lockrun's acquire and release, per run of `lockrun -- true`"] = [
            None, statistics.median(cpu[transport]), None, None]
    return rows


def perf_stat(args, binary, sock, inherit):
    cmd = ["perf", "stat", "-x", ",", "-r", str(args.runs), "-e", "task-clock,page-faults"]
    if not inherit:
        cmd.append("--no-inherit")
    out = subprocess.run(cmd + lockrun_true(binary, sock), capture_output=True, text=True,
                         stdin=subprocess.DEVNULL).stderr
    vals = {}
    for line in out.splitlines():
        f = line.split(",")
        if len(f) > 2 and f[0] and f[0][0].isdigit():
            vals[f[2]] = float(f[0])
    return vals


def wall(args, sock):
    times = {b: [] for b in args.lockrun}
    for _ in range(args.runs):
        for binary in args.lockrun:
            t = time.perf_counter()
            subprocess.run(lockrun_true(binary, sock), check=True, stdin=subprocess.DEVNULL)
            times[binary].append((time.perf_counter() - t) * 1000)
    return {b: statistics.median(t) for b, t in times.items()}


def instructions(binary, sock):
    cmd = lockrun_true(binary, sock)
    out = ""
    if shutil.which("perf"):
        out = subprocess.run(["perf", "stat", "-x", ",", "--no-inherit", "-e", "instructions:u"] + cmd,
                             capture_output=True, text=True).stderr
    for line in out.splitlines():
        f = line.split(",")
        if len(f) > 2 and "instructions" in f[2] and f[0].isdigit():
            return int(f[0]), "perf stat -e instructions:u"
    if not shutil.which("valgrind"):
        return None, "neither perf's instructions counter nor valgrind here"
    counts = []
    for _ in range(3):
        out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] + cmd,
                             capture_output=True, text=True).stderr
        counts += [int(m.replace(",", "")) for m in re.findall(r"Collected : ([\d,]+)", out)]
    return int(statistics.median(counts)), "callgrind, median of 3 runs"


def report(args, sock, port, work):
    names = [os.path.relpath(b) if len(args.lockrun) > 1 else "lockrun" for b in args.lockrun]
    head = "| | " + " | ".join(names) + " |\n|---|" + "---:|" * len(names)
    table = steps(args, sock, work) if shutil.which("perf") else None
    if table:
        print(f"Steps of one run, perf trace, median of {args.runs} (ms; each starts at its own "
              f"median, so they need not add up to the total):\n")
        print(head)
        for row, (step, _, _) in enumerate(table[args.lockrun[0]]):
            print(f"| {step} | " + " | ".join(f"{table[b][row][2]:.3f}" for b in args.lockrun) + " |")
        print()
    handoff = handoffs(args, sock, work) if shutil.which("perf") else None
    if handoff:
        print(f"Steps of one hand-off, perf trace, median of {args.runs} (ms): a holder's command "
              f"(`sleep 0.15`) exits and a waiter's (`true`) starts; lockrun and flock(1) "
              f"alike, lockrun on a unix socket:\n")
        print("| | " + os.path.basename(args.lockrun[0]) + " | flock |\n|---|---:|---:|")
        for (step, mine), (_, theirs) in zip(handoff["lockrun"], handoff["flock"]):
            print(f"| {HANDOFF_STEPS.get(step, step)} | {mine:.3f} | {theirs:.3f} |")
        print()
    if shutil.which("perf"):
        per = contended_cpu(args, sock, work)
        print("CPU time per acquisition, 8 contenders x 25 runs of `true` on one lock (perf stat over "
              "every process of the run; redis-server's from its INFO cpu), and what 2 CPUs could "
              "do at most at that cost:\n")
        print("| | " + os.path.basename(args.lockrun[0]) + " | flock |\n|---|---:|---:|")
        rows = (("tool and its command", 0), ("redis-server", 1))
        for what, i in rows:
            print(f"| {what} | {per['lockrun'][i]:.3f} ms | {per['flock'][i]:.3f} ms |")
        total = {t: v[0] + v[1] for t, v in per.items()}
        print(f"| total | {total['lockrun']:.3f} ms | {total['flock']:.3f} ms |")
        print(f"| at most, on {os.cpu_count()} CPUs | "
              + " | ".join(f"{os.cpu_count() * 1000 / total[t]:.0f} /s" for t in ("lockrun", "flock"))
              + " |")
        print(f"| measured | {per['lockrun'][2]:.0f} /s | {per['flock'][2]:.0f} /s |")
        print()
    rows = floor(args, sock, port)
    print("The floor under any Redis lock here: a client (Python, raw socket) that connects, "
          "makes two requests one at a time and closes, with Redis idle 2 ms before each "
          "request (as a run finds it) and back to back; round trips are the first request's; "
          f"medians of {FLOOR_ROUNDS} rounds of {FLOOR_SESSIONS} sessions, the cases of a round in "
          "a random order:\n")
    print("| requests | round trip, idle | redis-server CPU per session, idle "
          "| round trip, back to back | redis-server CPU per session, back to back |")
    print("|---|---:|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join("" if v is None else f"{v:.0f} µs" for v in row) + " |")
    print()
    print(f"Untraced, per run of `lockrun --redis unix://... --key K -- true`:\n")
    print(head)
    walls = wall(args, sock)
    print(f"| wall, median of {args.runs} | " + " | ".join(f"{walls[b]:.3f} ms" for b in args.lockrun) + " |")
    if shutil.which("perf"):
        for inherit, who in ((False, "lockrun"), (True, "lockrun + `true`")):
            stats = [perf_stat(args, b, sock, inherit) for b in args.lockrun]
            print(f"| CPU time (task-clock), {who}, mean | "
                  + " | ".join(f"{v.get('task-clock', 0):.3f} ms" for v in stats) + " |")
            print(f"| page faults, {who}, mean | "
                  + " | ".join(f"{v.get('page-faults', 0):.0f}" for v in stats) + " |")
    counts = [instructions(b, sock) for b in args.lockrun]
    print(f"| instructions, lockrun ({counts[0][1]}) | "
          + " | ".join(f"{c:,}" if c else "?" for c, _ in counts) + " |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lockrun", required=True, action="append",
                   help="the binary; give it twice to compare two, side by side")
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--keep", help="a directory to copy the traces that could not be read to")
    args = p.parse_args()
    args.lockrun = [os.path.abspath(b) for b in args.lockrun]
    # SIGTERM (bench/run.sh's clean-up) ends this through `finally`, which
    # stops the redis-server.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="lockrun-breakdown.") as work:
        redis, sock, port = start_redis(work)
        try:
            report(args, sock, port, work)
        finally:
            redis.terminate()
            redis.wait()


if __name__ == "__main__":
    main()
