#!/usr/bin/env python3
"""lockrun against flock(1) and etcdctl lock, side by side in one run on one machine.

Run through bench/run.sh, which builds lockrun, starts a throwaway
redis-server (and a throwaway etcd when etcd is installed; then
`etcdctl lock` is measured as a third tool) and removes them afterwards.
This file only measures and reports:

1. overhead:   `X -- true` wall time, median and p99;
2. handoff:    N contenders take one lock in turn for a 50 ms job; the gap
               from one job's end to the next job's start, median and p99,
               and overlaps (must be 0);
3. throughput: 8 contenders x 25 acquisitions running `true`;
4. memory:     peak RSS (VmHWM) of the lockrun (and etcdctl) process while
               its child runs, and while it waits;
5. growth:     overhead with 1, 100 and 1,000 other lock keys held in Redis;
6. queue:      N runs of `X -- sleep 0.02` on one key started together (N = 5,
               60, 200): wall time, and Redis script calls per acquisition;
7. fairness:   20 waiters started 50 ms apart behind a holder: grants out of
               arrival order;
8. slots:      60 runs of `lockrun --slots 3 -- sleep 0.05` on one key started
               together: wall time against the ideal (60 x 50 ms / 3), and
               Redis script calls per acquisition.

`--only slots` measures one case and prints it, leaving BENCHMARKS.md alone.

Measurements of different tools are interleaved (round-robin) so that a
noisy neighbour on the machine slows all of them alike, and the verdicts
compare ratios within this one run.
"""

import argparse
import datetime
import http.client
import json
import math
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

# Targets from issues 5, 10 and 37 (the static build's), as ratios to flock(1)
# measured in the same run.
OVERHEAD_MEDIAN_RATIO = 1.3
HANDOFF_MEDIAN_RATIO = 1.35
HANDOFF_P99_RATIO = 2.0
THROUGHPUT_RATIO = 0.65
PEAK_RSS_KIB = 4 * 1024
# Issue 29: a run over TLS 1.3 against the same run over TCP.
TLS_RATIO = 1.5
GROWTH_TOLERANCE = 0.10
QUEUE_WALL_RATIO = 1.1
QUEUE_SCRIPT_CALLS = 4
# Issue 17: one wake-up per freed place, so no more script calls per
# acquisition with 3 slots than with one.
SLOTS_SCRIPT_CALLS = 4
SLOTS_WAITERS = 60
SLOTS = 3

JOB_MS = 50


def percentile(values, p):
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def ms(ns):
    return ns / 1e6


def paired(values, base):
    """The median of the per-round ratios values[i] / base[i]: the tools of
    one round ran side by side, so a neighbour's burst that slows one round
    cancels out of its ratio, where it would move the two medians apart (the
    one method of BENCHMARKS.md, "How each figure is taken")."""
    return statistics.median(v / b for v, b in zip(values, base))


class Redis:
    """Just enough RESP to seed and inspect the throwaway server."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def _encode(self, args):
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
        return b"".join(out)

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind in (b"+", b":"):
            return rest.decode()
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            while len(self.buf) < size + 2:
                self.buf += self.sock.recv(65536)
            data, self.buf = self.buf[:size], self.buf[size + 2 :]
            return data.decode()
        if kind == b"*":
            return [self._reply() for _ in range(int(rest))]
        raise RuntimeError("unexpected reply %r" % line)

    def pipeline(self, commands):
        if not commands:
            return []
        self.sock.sendall(b"".join(self._encode(c) for c in commands))
        return [self._reply() for _ in commands]

    def call(self, *args):
        return self.pipeline([args])[0]


class EtcdLeases:
    """etcd's JSON gateway, just enough to list and revoke leases.

    `etcdctl lock` leaves its session lease to expire (ttl 10 s), and etcd
    revokes expired leases in the background: left alone, that clean-up of
    one etcdctl run would land on the next tool's measurements. The benchmark
    revokes them right after each etcdctl run instead, outside the timing."""

    def __init__(self, endpoint):
        host, port = endpoint.split("://", 1)[1].rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=10)

    def _post(self, path, body):
        self.conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        reply = self.conn.getresponse()
        data = reply.read()
        if reply.status != 200:
            raise RuntimeError("etcd %s: %d %s" % (path, reply.status, data[:200]))
        return json.loads(data)

    def revoke_all(self):
        leases = self._post("/v3/lease/leases", {}).get("leases", [])
        for lease in leases:
            try:
                self._post("/v3/lease/revoke", {"ID": lease["ID"]})
            except RuntimeError as err:
                # Expired and revoked by etcd in the meantime.
                if "not found" not in str(err):
                    raise
        return len(leases)


class Bench:
    def __init__(self, opts):
        self.opts = opts
        self.work = opts.work
        self.true = shutil.which("true")
        self.flock = shutil.which("flock")
        self.lockfile = os.path.join(self.work, "flock.lock")
        self.tcp = "redis://127.0.0.1:%d" % opts.port
        # TLS 1.3 to the same server, trusting the throwaway CA (run.sh).
        self.tls = (
            ["--redis", "rediss://127.0.0.1:%d" % opts.tls_port, "--redis-ca-file", opts.ca]
            if opts.tls_port else None
        )
        self.unix = "unix://%s" % opts.socket
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("LOCKRUN_", "ETCD_", "ETCDCTL_"))
        }
        # etcdctl lock, a third tool, when bench/run.sh started an etcd.
        self.etcd = opts.etcd_endpoint
        if self.etcd:
            self.etcdctl = shutil.which("etcdctl")
            if not self.etcdctl:
                sys.exit("bench: --etcd-endpoint given but etcdctl is not on PATH")
            self.env["ETCDCTL_API"] = "3"
            self.leases = EtcdLeases(self.etcd)
        self.devnull = os.open(os.devnull, os.O_RDWR)
        self.errlog = os.path.join(self.work, "stderr.log")
        self.redis = Redis(opts.port)
        self.live = set()
        # The paired ratios to flock (`paired`), filled in as measured.
        self.overhead_ratio = {}
        self.handoff_ratio = {}
        self.throughput_ratio = {}
        self.baseline_difference = None
        self.handoff_baseline_difference = {}
        self.growth_ratio = {}

    # --- commands -----------------------------------------------------------

    def lockrun(self, url, key, command, wait=False, binary=None):
        argv = [binary or self.opts.lockrun, "--redis", url, "--key", key]
        if wait:
            argv += ["--wait", "forever"]
        return argv + ["--"] + command

    def flock_cmd(self, command):
        return [self.flock, self.lockfile] + command

    def settle(self, name):
        """After a run of `name`: revoke what etcdctl leaves behind."""
        if name == "etcdctl":
            self.leases.revoke_all()

    def etcdctl_cmd(self, key, command):
        """`etcdctl lock NAME -- CMD`: blocks until it holds the lock, runs CMD,
        then releases it. The `--` keeps CMD's own options away from etcdctl."""
        return [self.etcdctl, "--endpoints=" + self.etcd, "lock", key, "--"] + command

    def tools(self, key, command, wait=False):
        """The compared commands, lockrun over TCP first (the headline)."""
        tools = [
            ("lockrun tcp", self.lockrun(self.tcp, key, command, wait)),
            ("lockrun unix", self.lockrun(self.unix, key, command, wait)),
            ("flock", self.flock_cmd(command)),
        ]
        if self.opts.lockrun_dynamic:
            tools.append(("dynamic tcp", self.lockrun(self.tcp, key, command, wait,
                                                     self.opts.lockrun_dynamic)))
        if self.etcd:
            tools.append(("etcdctl", self.etcdctl_cmd(key, command)))
        return tools

    # --- primitives ---------------------------------------------------------

    def spawn(self, argv):
        """Starts argv in a process group of its own, so that `stop_all` can
        take it down with whatever it started."""
        err = os.open(self.errlog, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            pid = os.posix_spawn(
                argv[0],
                argv,
                self.env,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, self.devnull, 0),
                    (os.POSIX_SPAWN_DUP2, self.devnull, 1),
                    (os.POSIX_SPAWN_DUP2, err, 2),
                ],
                setpgroup=0,
            )
        finally:
            os.close(err)
        self.live.add(pid)
        return pid

    def reap(self, pid, flags=0):
        done, status = os.waitpid(pid, flags)
        if done:
            self.live.discard(pid)
        return done, status

    def stop_all(self):
        """Kills everything still running, when the benchmark is interrupted."""
        for pid in list(self.live):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            self.reap(pid)

    def wait_ok(self, pid, argv):
        _, status = self.reap(pid)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            sys.exit(
                "bench: %s exited %d; see %s" % (" ".join(argv), code, self.errlog)
            )

    def timed(self, argv):
        """Wall time of one run, from spawn to reaped, in ns."""
        started = time.perf_counter_ns()
        pid = self.spawn(argv)
        self.wait_ok(pid, argv)
        return time.perf_counter_ns() - started

    def overhead_samples(self, tools, runs, warmup=20):
        """Round-robin runs of each tool, in a fresh random order per round:
        {tool: [ns of round 0, round 1, ...]}, one sample a round."""
        samples = {name: [] for name, _ in tools}
        for i in range(warmup + runs):
            order = list(tools)
            random.shuffle(order)
            for name, argv in order:
                took = self.timed(argv)
                self.settle(name)
                if i >= warmup:
                    samples[name].append(took)
        return samples

    # --- 1. overhead --------------------------------------------------------

    def overhead(self):
        runs = self.opts.runs
        tools = [
            ("true alone", [self.true]),
            ("lockrun start-up", [self.opts.lockrun, "--version"]),
        ] + self.tools("bench-overhead", [self.true])
        if self.tls:
            tls = [self.opts.lockrun] + self.tls + ["--key", "bench-overhead", "--", self.true]
            tools.append(("lockrun tls", tls))
        if self.opts.baseline:
            tools.append(("baseline tcp", self.lockrun(self.tcp, "bench-overhead", [self.true],
                                                       binary=self.opts.baseline)))
        samples = self.overhead_samples(tools, runs)
        if self.opts.baseline:
            self.baseline_difference = ms(statistics.median(
                a - b for a, b in zip(samples["lockrun tcp"], samples["baseline tcp"])))
        result = {
            name: (ms(statistics.median(s)), ms(percentile(s, 99))) for name, s in samples.items()
        }
        # The ratios, round by round: to flock, and TLS to TCP.
        self.overhead_ratio = {
            name: paired(s, samples["flock"]) for name, s in samples.items()
        }
        if self.tls:
            self.overhead_ratio["tls to tcp"] = paired(samples["lockrun tls"],
                                                       samples["lockrun tcp"])
        return result

    # --- 2. handoff ---------------------------------------------------------

    def contend(self, argv, contenders, each):
        """`contenders` shell loops, each running argv `each` times; returns
        the wall time of the whole."""
        loop = 'n=$1; shift; i=0; while [ "$i" -lt "$n" ]; do "$@" || exit 1; i=$((i+1)); done'
        script = ["/bin/sh", "-c", loop, "sh", str(each)] + argv
        started = time.perf_counter_ns()
        pids = [self.spawn(script) for _ in range(contenders)]
        limit = time.monotonic() + 30 + contenders * each * 0.5
        pending = set(pids)
        failed = False
        while pending:
            for pid in list(pending):
                done, status = self.reap(pid, os.WNOHANG)
                if done:
                    pending.discard(pid)
                    failed |= os.waitstatus_to_exitcode(status) != 0
            if pending and time.monotonic() > limit:
                sys.exit("bench: contenders did not finish in time: %s" % " ".join(argv))
            if pending:
                time.sleep(0.002)
        if failed:
            sys.exit("bench: a contender failed: %s; see %s" % (" ".join(argv), self.errlog))
        return time.perf_counter_ns() - started

    def handoff_once(self, name, argv_of, contenders, each):
        log = os.path.join(self.work, "handoff.log")
        marker = os.path.join(self.work, "handoff.marker")
        if os.path.exists(log):
            os.unlink(log)
        if os.path.isdir(marker):
            os.rmdir(marker)
        job = [self.opts.stamp, log, marker, str(JOB_MS)]
        self.contend(argv_of(job), contenders, each)
        jobs = []
        with open(log) as f:
            for line in f:
                start, end, overlapped = line.split()
                jobs.append((int(start), int(end), int(overlapped)))
        if len(jobs) != contenders * each:
            sys.exit("bench: %s ran %d jobs, expected %d" % (name, len(jobs), contenders * each))
        jobs.sort()
        overlaps = sum(j[2] for j in jobs)
        gaps = []
        for before, after in zip(jobs, jobs[1:]):
            gap = after[0] - before[1]
            if gap < 0:
                overlaps += 1
            gaps.append(gap)
        return gaps, overlaps

    def handoff(self, contenders, acquisitions):
        each = max(1, acquisitions // contenders)
        key = "bench-handoff-%d" % contenders
        tools = [
            ("lockrun tcp", lambda job: self.lockrun(self.tcp, key, job, wait=True)),
            ("lockrun unix", lambda job: self.lockrun(self.unix, key, job, wait=True)),
            ("flock", lambda job: self.flock_cmd(job)),
        ]
        if self.opts.lockrun_dynamic:
            tools.append(("dynamic tcp", lambda job: self.lockrun(
                self.tcp, key, job, wait=True, binary=self.opts.lockrun_dynamic)))
        if self.opts.baseline:
            tools.append(("baseline tcp", lambda job: self.lockrun(
                self.tcp, key, job, wait=True, binary=self.opts.baseline)))
        if self.etcd:
            tools.append(("etcdctl", lambda job: self.etcdctl_cmd(key, job)))
        gaps = {name: [] for name, _ in tools}
        round_medians = {name: [] for name, _ in tools}
        overlaps = {name: 0 for name, _ in tools}
        # Six rounds, the tools alternating, so that drift hits all of them
        # and each round's median gap pairs with the other tools'.
        rounds = 6
        per_round = max(1, each // rounds)
        for r in range(rounds):
            for name, argv_of in tools if r % 2 == 0 else reversed(tools):
                g, o = self.handoff_once(name, argv_of, contenders, per_round)
                self.settle(name)
                gaps[name] += g
                round_medians[name].append(statistics.median(g))
                overlaps[name] += o
        self.handoff_ratio[contenders] = {
            name: paired(m, round_medians["flock"]) for name, m in round_medians.items()
        }
        if self.opts.baseline:
            self.handoff_baseline_difference[contenders] = ms(statistics.median(
                a - b for a, b in zip(round_medians["lockrun tcp"], round_medians["baseline tcp"])))
        return {
            name: (
                ms(statistics.median(g)),
                ms(percentile(g, 99)),
                overlaps[name],
                len(g),
            )
            for name, g in gaps.items()
        }

    # --- 3. throughput ------------------------------------------------------

    # Nine, not three: a repetition takes a third of a second, and the
    # ratio of three moved by ±0.07 between runs on the same binaries.
    def throughput(self, contenders=8, each=25, reps=9):
        tools = self.tools("bench-throughput", [self.true], wait=True)
        rates = {name: [] for name, _ in tools}
        for r in range(reps):
            for name, argv in tools if r % 2 == 0 else reversed(tools):
                took = self.contend(argv, contenders, each)
                self.settle(name)
                rates[name].append(contenders * each / (took / 1e9))
        self.throughput_ratio = {name: paired(r, rates["flock"]) for name, r in rates.items()}
        return {name: statistics.median(r) for name, r in rates.items()}

    # --- 4. memory ----------------------------------------------------------

    @staticmethod
    def status_kib(pid, field):
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise RuntimeError("no %s for pid %d" % (field, pid))

    @staticmethod
    def has_child(pid):
        """Whether any thread of pid has started a child: a Go program such as
        etcdctl forks from whichever thread its goroutine runs on."""
        try:
            tasks = os.listdir("/proc/%d/task" % pid)
        except OSError:
            return False
        for tid in tasks:
            try:
                with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                    if f.read().split():
                        return True
            except OSError:
                pass
        return False

    def wait_started(self, pid, what):
        deadline = time.monotonic() + 10
        while not self.has_child(pid):
            if time.monotonic() > deadline:
                raise RuntimeError("%s never started its command" % what)
            time.sleep(0.01)

    def peak_rss(self, argv, after=None):
        """VmHWM of the process started with argv (not its child), read once
        it is running its command, or after `after` seconds."""
        pid = self.spawn(argv)
        try:
            if after is None:
                self.wait_started(pid, argv[0])
                time.sleep(0.2)
            else:
                time.sleep(after)
            return self.status_kib(pid, "VmHWM")
        finally:
            self.wait_ok(pid, argv)

    def waiting_rss(self, holder_argv, waiter_argv):
        """VmHWM of a waiter while a holder runs its command."""
        holder = self.spawn(holder_argv)
        try:
            self.wait_started(holder, "the holder")
            return self.peak_rss(waiter_argv, after=0.5)
        finally:
            self.wait_ok(holder, holder_argv)

    def memory(self, reps=3):
        """Peak RSS in KiB: {tool: (holding, waiting or None)}."""
        sleep = shutil.which("sleep")
        rss = {"lockrun tcp": ([], []), "flock": ([], [])}
        if self.opts.lockrun_dynamic:
            rss["dynamic tcp"] = ([], [])
        if self.etcd:
            rss["etcdctl"] = ([], [])
        for _ in range(reps):
            if self.opts.lockrun_dynamic:
                rss["dynamic tcp"][0].append(self.peak_rss(self.lockrun(
                    self.tcp, "bench-mem", [sleep, "0.5"], binary=self.opts.lockrun_dynamic)))
            rss["lockrun tcp"][0].append(
                self.peak_rss(self.lockrun(self.tcp, "bench-mem", [sleep, "0.5"])))
            rss["flock"][0].append(self.peak_rss(self.flock_cmd([sleep, "0.5"])))
            # A waiter, in line and subscribed to its wake-up channel, while a holder runs.
            rss["lockrun tcp"][1].append(self.waiting_rss(
                self.lockrun(self.tcp, "bench-mem", [sleep, "1.2"]),
                self.lockrun(self.tcp, "bench-mem", [self.true], wait=True)))
            if self.etcd:
                rss["etcdctl"][0].append(
                    self.peak_rss(self.etcdctl_cmd("bench-mem", [sleep, "0.5"])))
                # A waiter, watching the holder's key, while the holder runs.
                rss["etcdctl"][1].append(self.waiting_rss(
                    self.etcdctl_cmd("bench-mem", [sleep, "1.2"]),
                    self.etcdctl_cmd("bench-mem", [self.true])))
                self.settle("etcdctl")
        return {
            name: (max(hold), max(wait) if wait else None) for name, (hold, wait) in rss.items()
        }

    # --- 5. cost growth -----------------------------------------------------

    # --- 6. queue -----------------------------------------------------------

    def script_calls(self):
        """Lua script calls Redis has run so far (EVALSHA and EVAL)."""
        stats = self.redis.call("INFO", "commandstats")
        calls = 0
        for line in stats.splitlines():
            name, _, fields = line.partition(":")
            if name in ("cmdstat_evalsha", "cmdstat_eval"):
                calls += int(dict(f.split("=") for f in fields.split(","))["calls"])
        return calls

    def crowd(self, argv, count):
        """Starts `count` copies of argv together; the wall time until the
        last one is reaped, in ns."""
        started = time.perf_counter_ns()
        pids = [self.spawn(argv) for _ in range(count)]
        for pid in pids:
            self.wait_ok(pid, argv)
        return time.perf_counter_ns() - started

    def queue(self, counts=(5, 60, 200), reps=3):
        """{count: (lockrun wall ms, flock wall ms, lockrun script calls per
        acquisition)}, the medians of `reps` alternating runs."""
        sleep = shutil.which("sleep")
        job = [sleep, "0.02"]
        lockrun = self.lockrun(self.tcp, "bench-queue", job, wait=True)
        flock = self.flock_cmd(job)
        result = {}
        for count in counts:
            walls = {"lockrun": [], "flock": []}
            calls = []
            for r in range(reps):
                for name in ("lockrun", "flock") if r % 2 == 0 else ("flock", "lockrun"):
                    before = self.script_calls()
                    walls[name].append(self.crowd(lockrun if name == "lockrun" else flock, count))
                    if name == "lockrun":
                        calls.append((self.script_calls() - before) / count)
            result[count] = (
                ms(statistics.median(walls["lockrun"])),
                ms(statistics.median(walls["flock"])),
                statistics.median(calls),
            )
        return result

    # --- 7. fairness --------------------------------------------------------

    def order_of_grants(self, holder, waiter_of, count=20, apart=0.05):
        """Starts `holder`, then `count` waiters `apart` seconds apart, each
        logging its number when it gets the lock; returns how many pairs of
        waiters got it in the opposite order of their arrival."""
        log = os.path.join(self.work, "fairness.log")
        if os.path.exists(log):
            os.unlink(log)
        pids = [self.spawn(holder)]
        # Let the holder take the lock before anyone queues behind it.
        time.sleep(0.1)
        for i in range(count):
            pids.append(self.spawn(waiter_of(["/bin/sh", "-c", 'echo "$1" >> "$0"', log, str(i)])))
            time.sleep(apart)
        for pid in pids:
            self.wait_ok(pid, holder)
        with open(log) as f:
            order = [int(line) for line in f]
        if sorted(order) != list(range(count)):
            sys.exit("bench: fairness: %d of %d waiters ran" % (len(order), count))
        return sum(1 for i in range(count) for j in range(i + 1, count) if order[i] > order[j])

    def fairness(self, reps=3):
        """{tool: the most out-of-order pairs in `reps` runs}"""
        sleep = shutil.which("sleep")
        hold = [sleep, "1.3"]
        tools = {
            "lockrun": (self.lockrun(self.tcp, "bench-fair", hold),
                        lambda job: self.lockrun(self.tcp, "bench-fair", job, wait=True)),
            "flock": (self.flock_cmd(hold), self.flock_cmd),
        }
        worst = {name: 0 for name in tools}
        for _ in range(reps):
            for name, (holder, waiter_of) in tools.items():
                worst[name] = max(worst[name], self.order_of_grants(holder, waiter_of))
        return worst

    # --- 8. slots ------------------------------------------------------------

    def slots(self, count=SLOTS_WAITERS, slots=SLOTS, reps=3):
        """`count` runs of a JOB_MS job on one key with `--slots N`, started
        together: (wall ms, ideal ms, script calls per acquisition, most jobs
        running at once in any repetition), the first three the medians of
        `reps` repetitions. The ideal keeps every slot busy all the time."""
        log = os.path.join(self.work, "slots.log")
        argv = [self.opts.lockrun, "--redis", self.tcp, "--key", "bench-slots",
                "--slots", str(slots), "--wait", "forever", "--", self.opts.stamp, log]
        # The stamp job logs its start and end; a marker of its own per run,
        # since the slots let the jobs overlap.
        runs = [argv + [os.path.join(self.work, "slots.%d" % i), str(JOB_MS)]
                for i in range(count)]
        walls, calls, most = [], [], 0
        for _ in range(reps):
            if os.path.exists(log):
                os.unlink(log)
            before = self.script_calls()
            started = time.perf_counter_ns()
            pids = [self.spawn(run) for run in runs]
            for pid, run in zip(pids, runs):
                self.wait_ok(pid, run)
            walls.append(time.perf_counter_ns() - started)
            calls.append((self.script_calls() - before) / count)
            with open(log) as f:
                spans = [[int(x) for x in line.split()[:2]] for line in f]
            if len(spans) != count:
                sys.exit("bench: slots: %d of %d jobs ran" % (len(spans), count))
            # An end sorts before a start at the same instant.
            inside = 0
            for _, step in sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans]):
                inside += step
                most = max(most, inside)
        return (ms(statistics.median(walls)), count * JOB_MS / slots,
                statistics.median(calls), most)

    def set_other_keys(self, count):
        keys = ["lockrun:{bench-other-%d}" % i for i in range(1000)]
        if keys[count:]:
            self.redis.call("DEL", *keys[count:])
        self.redis.pipeline([("SET", k, "held-by-bench", "PX", 600000) for k in keys[:count]])
        prefix = "lockrun:{bench-other-"
        held = [k for k in self.redis.call("KEYS", prefix + "*")]
        if len(held) != count:
            sys.exit("bench: expected %d other keys, found %d" % (count, len(held)))

    def growth(self, levels=(1, 100, 1000), rounds=8):
        per_round = max(1, self.opts.runs // rounds)
        argv = self.lockrun(self.tcp, "bench-growth", [self.true])
        flock = self.flock_cmd([self.true])
        samples = {n: [] for n in levels}
        # Each lockrun run paired with a flock run beside it, whose time
        # the keys in Redis do not move: the growth is of the paired ratio.
        ratios = {n: [] for n in levels}
        for r in range(rounds):
            order = list(levels) if r % 2 == 0 else list(reversed(levels))
            for n in order:
                self.set_other_keys(n)
                for i in range(per_round + 3):
                    pair = [argv, flock] if i % 2 == 0 else [flock, argv]
                    took = {id(a): self.timed(a) for a in pair}
                    if i >= 3:
                        samples[n].append(took[id(argv)])
                        ratios[n].append(took[id(argv)] / took[id(flock)])
        self.set_other_keys(0)
        self.growth_ratio = {n: statistics.median(ratios[n]) / statistics.median(ratios[levels[0]])
                             for n in levels}
        return {n: (ms(statistics.median(s)), ms(percentile(s, 99))) for n, s in samples.items()}


def machine():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    redis = subprocess.run(
        ["redis-server", "--version"], capture_output=True, text=True
    ).stdout.strip()
    version = redis.split("v=")[1].split()[0] if "v=" in redis else redis
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "kernel": platform.release(),
        "redis": version,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load": " ".join("%.2f" % x for x in os.getloadavg()),
        "nice": os.nice(0),
    }


def verdict(ok):
    return "met" if ok else "**missed**"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lockrun", required=True, help="the build measured: the static one")
    parser.add_argument("--lockrun-dynamic", help="the dynamic (glibc) build, measured beside it")
    parser.add_argument("--stamp", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tls-port", type=int, help="the same server's TLS port")
    parser.add_argument("--ca", help="the CA that signed its certificate")
    parser.add_argument("--runs", type=int, default=300, help="overhead runs per tool")
    parser.add_argument(
        "--handoffs", type=int, default=300, help="acquisitions per handoff setting and tool"
    )
    parser.add_argument("--etcd-note", default="", help="why etcdctl lock is not measured")
    parser.add_argument("--etcd-endpoint", help="a throwaway etcd to measure etcdctl lock against")
    parser.add_argument("--etcd-version", default="unknown")
    parser.add_argument("--etcdctl-version", default="unknown")
    parser.add_argument(
        "--only", choices=["slots", "overhead", "handoff"],
        help="measure this one case and print it; --out is left alone"
    )
    parser.add_argument(
        "--baseline", help="another build of lockrun, measured in the overhead's (or the "
        "hand-off's) rounds: how to judge a change (bench/README.md)"
    )
    opts = parser.parse_args()

    began = time.monotonic()
    info = machine()
    bench = Bench(opts)
    # bench/run.sh stops this with SIGTERM when it is interrupted.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        if opts.only:
            measure_only(bench, opts, info, began)
        else:
            measure(bench, opts, info, began)
    finally:
        bench.stop_all()


def slots_rows(result, row):
    """The table rows of the slots case, through `row` (see `measure`)."""
    wall, ideal, calls, most = result
    row("slots, %d waiters × a %d ms job on %d slots, wall" % (SLOTS_WAITERS, JOB_MS, SLOTS),
        "%.0f ms" % wall, "", "", "", "%.2f× of the ideal %.0f ms" % (wall / ideal, ideal), "",
        "", "")
    row("slots, %d waiters: Redis script calls per acquisition" % SLOTS_WAITERS, "%.2f" % calls,
        "", "", "", "", "", "≤ %d" % SLOTS_SCRIPT_CALLS, verdict(calls <= SLOTS_SCRIPT_CALLS))
    row("slots, %d waiters: most jobs running at once" % SLOTS_WAITERS, str(most), "", "", "",
        "", "", "≤ %d" % SLOTS, verdict(most <= SLOTS))


# The sections of BENCHMARKS.md that a script writes: run.sh appends this one
# after bench.py's text. Every other `## ` section holds figures measured by
# hand for one change, and is kept when the file is rewritten.
WRITTEN_SECTIONS = ("One run, step by step\n",)


def kept_sections(path):
    """The sections of `path` measured by hand, to write back after the new figures."""
    try:
        with open(path) as f:
            old = f.read()
    except FileNotFoundError:
        return ""
    return "".join("\n## " + part.rstrip("\n") + "\n"
                   for part in old.split("\n## ")[1:]
                   if not part.startswith(WRITTEN_SECTIONS))


def measure_only(bench, opts, info, began):
    """One case, printed as rows of the BENCHMARKS.md table."""
    print("bench: %s only..." % opts.only, file=sys.stderr, flush=True)
    rows = []

    def row(what, tcp, unix, flock, etc, ratio, etc_ratio, target, ok):
        rows.append("| %s |" % " | ".join([what, tcp, ratio, target, ok]))

    if opts.only == "slots":
        slots_rows(bench.slots(), row)
    elif opts.only == "handoff":
        for n in (3, 8):
            gaps = bench.handoff(n, opts.handoffs)
            for name, (median, p99, overlaps, count) in gaps.items():
                row("handoff gap, %d contenders, `%s`, median (p99; overlaps of %d)"
                    % (n, name, count), "%.3f ms (%.3f; %d)" % (median, p99, overlaps), "", "",
                    "", "%.3f× flock" % bench.handoff_ratio[n][name], "", "", "")
            if n in bench.handoff_baseline_difference:
                row("handoff gap, %d contenders, this build less `--baseline`, per round" % n,
                    "%+.3f ms" % bench.handoff_baseline_difference[n], "", "", "", "", "", "", "")
    else:
        over = bench.overhead()
        for name, (median, p99) in over.items():
            row("`%s`, median (p99)" % name, "%.3f ms (%.3f)" % (median, p99), "", "", "",
                "%.3f× flock" % bench.overhead_ratio[name], "", "", "")
        if "lockrun tls" in over:
            r = bench.overhead_ratio["tls to tcp"]
            row("TLS run against the TCP run", "", "", "", "", "%.3f× of TCP" % r, "",
                "≤ %.2f×" % TLS_RATIO, verdict(r <= TLS_RATIO))
        if bench.baseline_difference is not None:
            row("this build less `--baseline`, per round", "%+.3f ms" % bench.baseline_difference,
                "", "", "", "", "", "", "")
    print("| measure | lockrun, TCP loopback | ratio | target | |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("machine: %(nproc)s CPUs, %(cpu)s, Linux %(kernel)s, redis %(redis)s, load %(load)s" % info)
    print("measured in %.0f s; %s left alone" % (time.monotonic() - began, opts.out))


def builds_table(bench, over, hand3, hand8, thru, rss):
    """The static build (the headline, what ships) and the dynamic one, each over TCP."""
    rows = []
    for what, results, ratios, fmt in (
        ("overhead `X -- true`, median", {k: v[0] for k, v in over.items()},
         bench.overhead_ratio, "%.2f ms"),
        ("handoff gap, 3 contenders, median", {k: v[0] for k, v in hand3.items()},
         bench.handoff_ratio[3], "%.2f ms"),
        ("handoff gap, 8 contenders, median", {k: v[0] for k, v in hand8.items()},
         bench.handoff_ratio[8], "%.2f ms"),
        ("throughput, 8 × 25 × `true`", thru, bench.throughput_ratio, "%.0f /s"),
    ):
        rows.append("| %s | %s (%.2f×) | %s (%.2f×) | %s |" % (
            what, fmt % results["lockrun tcp"], ratios["lockrun tcp"],
            fmt % results["dynamic tcp"], ratios["dynamic tcp"], fmt % results["flock"]))
    rows.append("| peak RSS (VmHWM) while the command runs | %.2f MiB | %.2f MiB | %.2f MiB |" % (
        rss["lockrun tcp"][0] / 1024, rss["dynamic tcp"][0] / 1024, rss["flock"][0] / 1024))
    return "\n".join([
        "",
        "The two builds side by side, measured in the same rounds (the ratio to flock in brackets):",
        "the static musl binary (`--target x86_64-unknown-linux-musl`, what the tarballs, the .deb",
        "and the .rpm ship; the table above) and the dynamic glibc one that `cargo build --release`",
        "gives:",
        "",
        "| measure | static (musl) | dynamic (glibc) | flock(1) |",
        "|---|---|---|---|",
    ] + rows) + "\n"


def measure(bench, opts, info, began):

    def say(text):
        print(text, file=sys.stderr, flush=True)

    etcd = bool(bench.etcd)
    say("bench: overhead (%d runs per tool)..." % opts.runs)
    over = bench.overhead()
    say("bench: handoff, 3 contenders...")
    hand3 = bench.handoff(3, opts.handoffs)
    say("bench: handoff, 8 contenders...")
    hand8 = bench.handoff(8, opts.handoffs)
    say("bench: throughput...")
    thru = bench.throughput()
    say("bench: memory...")
    rss = bench.memory()
    say("bench: cost growth...")
    grow = bench.growth()
    say("bench: queue of 5, 60 and 200 waiters...")
    line = bench.queue()
    say("bench: fairness...")
    fair = bench.fairness()
    say("bench: %d waiters on %d slots..." % (SLOTS_WAITERS, SLOTS))
    slots = bench.slots()
    elapsed = time.monotonic() - began
    info["load_end"] = " ".join("%.2f" % x for x in os.getloadavg())

    rows = []

    def row(what, tcp, unix, flock, etc, ratio, etc_ratio, target, ok):
        cells = [what, tcp, unix, flock] + ([etc] if etcd else []) + [ratio]
        cells += ([etc_ratio] if etcd else []) + [target, ok]
        rows.append("| %s |" % " | ".join(cells))

    def get(results, name):
        return results.get(name) if etcd else None

    f2 = lambda x: "%.2f ms" % x
    x2 = lambda r: "%.2f×" % r
    t, u, f, e = over["lockrun tcp"], over["lockrun unix"], over["flock"], get(over, "etcdctl")
    r = bench.overhead_ratio["lockrun tcp"]
    row("overhead `X -- true`, median", f2(t[0]), f2(u[0]), f2(f[0]), e and f2(e[0]), x2(r),
        e and x2(t[0] / e[0]), "≤ %.2f×" % OVERHEAD_MEDIAN_RATIO,
        verdict(r <= OVERHEAD_MEDIAN_RATIO))
    row("overhead `X -- true`, p99", f2(t[1]), f2(u[1]), f2(f[1]), e and f2(e[1]),
        x2(t[1] / f[1]), e and x2(t[1] / e[1]), "", "")
    if bench.baseline_difference is not None:
        row("overhead, this build less `--baseline`, median of the rounds' differences",
            "%+.3f ms" % bench.baseline_difference, "", "", "", "", "", "", "")
    if "lockrun tls" in over:
        r = bench.overhead_ratio["tls to tcp"]
        row("overhead `lockrun -- true` over TLS 1.3, median", f2(over["lockrun tls"][0]), "",
            "", "", "%.2f× of TCP" % r, "", "≤ 1.50× of TCP", verdict(r <= TLS_RATIO))
    for n, h in ((3, hand3), (8, hand8)):
        t, u, f, e = h["lockrun tcp"], h["lockrun unix"], h["flock"], get(h, "etcdctl")
        r = bench.handoff_ratio[n]["lockrun tcp"]
        row("handoff gap, %d contenders, median" % n, f2(t[0]), f2(u[0]), f2(f[0]),
            e and f2(e[0]), x2(r), e and x2(t[0] / e[0]),
            "≤ %.2f×" % HANDOFF_MEDIAN_RATIO, verdict(r <= HANDOFF_MEDIAN_RATIO))
        r = t[1] / f[1]
        row("handoff gap, %d contenders, p99" % n, f2(t[1]), f2(u[1]), f2(f[1]),
            e and f2(e[1]), x2(r), e and x2(t[1] / e[1]),
            "≤ %.1f×" % HANDOFF_P99_RATIO, verdict(r <= HANDOFF_P99_RATIO))
        all_zero = all(v[2] == 0 for v in h.values())
        row("handoff overlaps, %d contenders (%d gaps)" % (n, t[3]), str(t[2]), str(u[2]),
            str(f[2]), e and str(e[2]), "", "", "0", verdict(all_zero))
    t, u, f, e = thru["lockrun tcp"], thru["lockrun unix"], thru["flock"], get(thru, "etcdctl")
    r = bench.throughput_ratio["lockrun tcp"]
    rate = lambda x: "%.0f /s" % x
    row("throughput, 8 × 25 × `true`", rate(t), rate(u), rate(f), e and rate(e), x2(r),
        e and x2(t / e), "≥ %.2f×" % THROUGHPUT_RATIO, verdict(r >= THROUGHPUT_RATIO))
    mib = lambda kib: "%.2f MiB" % (kib / 1024)
    e = get(rss, "etcdctl")
    row("peak RSS (VmHWM) while the command runs", mib(rss["lockrun tcp"][0]), "",
        mib(rss["flock"][0]), e and mib(e[0]), "", e and x2(rss["lockrun tcp"][0] / e[0]),
        "≤ 4 MiB", verdict(rss["lockrun tcp"][0] <= PEAK_RSS_KIB))
    row("peak RSS (VmHWM) while waiting%s" % (", subscribed / watching" if etcd else ", subscribed"),
        mib(rss["lockrun tcp"][1]), "", "", e and mib(e[1]), "",
        e and x2(rss["lockrun tcp"][1] / e[1]),
        "≤ 4 MiB", verdict(rss["lockrun tcp"][1] <= PEAK_RSS_KIB))
    worst = max(abs(bench.growth_ratio[n] - 1) for n in grow)
    for n in sorted(grow):
        last = n == max(grow)
        row("overhead median, %s other key%s held" % (format(n, ","), "" if n == 1 else "s"),
            f2(grow[n][0]), "", "", "", "%.2f× of 1 key" % bench.growth_ratio[n], "",
            "±%d %%" % (GROWTH_TOLERANCE * 100) if last else "",
            verdict(worst <= GROWTH_TOLERANCE) if last else "")

    for n in sorted(line):
        lr, fl, calls = line[n]
        last = n == max(line)
        row("queue, %d waiters × `sleep 0.02`, wall" % n, "%.0f ms" % lr, "", "%.0f ms" % fl,
            "", x2(lr / fl), "", "≤ %.1f×" % QUEUE_WALL_RATIO if last else "",
            verdict(lr / fl <= QUEUE_WALL_RATIO) if last else "")
    worst = max(calls for _, _, calls in line.values())
    for n in sorted(line):
        calls = line[n][2]
        last = n == max(line)
        row("queue, %d waiters: Redis script calls per acquisition" % n, "%.2f" % calls, "", "",
            "", "", "", "≤ %d, any N" % QUEUE_SCRIPT_CALLS if last else "",
            verdict(worst <= QUEUE_SCRIPT_CALLS) if last else "")
    row("fairness: 20 waiters 50 ms apart, pairs granted out of arrival order (worst of 3)",
        str(fair["lockrun"]), "", str(fair["flock"]), "", "", "", "0",
        verdict(fair["lockrun"] == 0))
    slots_rows(slots, row)

    builds = builds_table(bench, over, hand3, hand8, thru, rss) if opts.lockrun_dynamic else ""
    columns = ["measure", "lockrun, TCP loopback", "lockrun, unix socket", "flock(1)"]
    columns += ["etcdctl lock"] if etcd else []
    columns += ["lockrun TCP / flock"]
    columns += ["lockrun TCP / etcdctl"] if etcd else []
    columns += ["target", ""]
    header = ["| %s |" % " | ".join(columns), "|%s" % ("---|" * len(columns))]
    table = "\n".join(header + rows)
    true_alone = over["true alone"]
    startup = over["lockrun start-up"]
    if etcd:
        versions = "etcd %s, etcdctl %s" % (opts.etcd_version, opts.etcdctl_version)
        tools = "lockrun against `flock(1)` and `etcdctl lock`"
        skip = "; `bench/run.sh --no-etcd` leaves etcdctl out and takes about a third less"
        etcd_line = (
            "- etcdctl lock: %s, API v3, one throwaway member on 127.0.0.1\n"
            "  with default settings and its data directory on the same disk (it fsyncs its log on\n"
            "  every write; 3.4 has no switch to turn that off; an fdatasync costs about 0.1 ms\n"
            "  here). Redis runs without persistence. etcdctl has no target: it is there for scale, a networked lock of the\n"
            "  common kind. `etcdctl lock NAME -- CMD` holds the lock while CMD runs and deletes its\n"
            "  key when CMD ends; its session lease (ttl 10 s) is left to expire, which the\n"
            "  benchmark does not wait for: it revokes those leases after each etcdctl run, outside\n"
            "  the timing, so that etcd's clean-up does not land on the other tools' figures. Any\n"
            "  failure of CMD becomes exit status 1." % versions
        )
        cmds = ",\n  `flock FILE true` and `etcdctl --endpoints=URL lock K -- true`,"
        waits = (
            "lockrun waits with\n  `--wait forever`, flock blocks, etcdctl blocks on a watch "
            "of the previous holder's key.\n "
        )
        rss_how = (
            "- **peak RSS**: `VmHWM` of the lockrun (or flock, or etcdctl) process itself (not its\n"
            "  child), read from `/proc/PID/status` while its command sleeps, and of a waiter\n"
            "  (lockrun subscribed to its wake-up channel, etcdctl watching the holder's key)\n"
            "  while a holder of the same tool runs; the largest of 3 runs."
        )
    else:
        versions = ""
        tools = "lockrun against `flock(1)`"
        skip = ""
        etcd_line = "- " + (opts.etcd_note or "etcdctl lock: not measured.")
        cmds = " and `flock FILE true`,"
        waits = "lockrun waits with\n  `--wait forever`, flock blocks.\n "
        rss_how = (
            "- **peak RSS**: `VmHWM` of the lockrun process itself (not its child), read from\n"
            "  `/proc/PID/status` while its command sleeps, and of a waiter subscribed to its wake-up\n"
            "  channel; the largest of 3 runs."
        )
    text = f"""# Benchmarks

{tools}, measured side by side in one run by `bench/run.sh`
({elapsed:.0f} s of measuring, plus the release builds{skip}). The targets are the ratios to flock from
issues 5, 10, 29 and 37; the headline column is the static build that ships, talking to Redis over TCP
loopback, the realistic case. One method throughout: the tools run side by side in rounds (in a
fresh random order each round), and each ratio is the median of the per-round ratios, so that a
busy neighbour's burst, which slows one round, cancels out of that round's ratio. Absolute figures
move with the machine's load and its cost of starting a glibc program (`true` alone, below: flock
pays it twice a run, for itself and for `true`, a static lockrun once, for `true`), the paired
ratios less: "Measured by hand", below, says how far and why.

- Machine: {info['nproc']} CPUs, {info['cpu']}, Linux {info['kernel']}, redis-server {info['redis']}{"; " + versions if versions else ""}
- Date: {info['date']}; load average {info['load']} at the start, {info['load_end']} at the end; niceness {info['nice']}
- `true` alone: {true_alone[0]:.2f} ms median, {true_alone[1]:.2f} ms p99 (the cost of starting any process here);
  `lockrun --version`: {startup[0]:.2f} ms median (lockrun's own start-up, before any Redis work)
{etcd_line}

{table}
{builds}
How each figure is taken:

- **overhead**: wall time from spawn (`posix_spawn`) to reaped of `lockrun --key K -- true`{cmds}
  {opts.runs} rounds after 20 warm-up rounds, uncontended; the ratio is the median of the per-round
  ratios. Over TLS: `rediss://` to the same server (a P-256 certificate from a throwaway CA, given
  with `--redis-ca-file`), in the same rounds, against the TCP run of the same round.
- **handoff**: 3 and 8 contenders, each a shell loop running the tool around a job that logs
  CLOCK_MONOTONIC at its start and end and sleeps {JOB_MS} ms (`bench/stamp.rs`, a tiny std-only
  binary, so its own start-up is a small, equal part of every gap). {waits} The gap is the next job's start minus the previous job's
  end. Six rounds, the tools alternating; the ratio is the median of the rounds' ratios of
  median gaps. An overlap is a job that found another's marker directory (mkdir) or started before
  the previous one ended.
- **throughput**: 8 contenders × 25 acquisitions of `true`, the median of 9 repetitions, the tools
  alternating; the ratio is the median of the repetitions' ratios.
{rss_how}
- **cost growth**: the overhead while 1, 100 and 1,000 other keys `lockrun:{{name}}` with a
  ttl are held in the same Redis, measured in alternating rounds, each run paired with a flock
  run beside it; the figure is the median ratio to flock against that with 1 key.
- **queue**: 5, 60 and 200 copies of `lockrun --wait forever --key K -- sleep 0.02` (and of
  `flock FILE sleep 0.02`) started together; the wall time until the last one is reaped, and
  the Redis script calls (`EVALSHA` + `EVAL` in `INFO commandstats`, before and after) divided
  by the number of acquisitions. Medians of 3 alternating runs. etcdctl is not measured here.
- **fairness**: a holder sleeps 1.3 s while 20 waiters start 50 ms apart, each logging its
  number when it gets the lock; the figure is the number of pairs of waiters that got the lock in
  the opposite order of their arrival (0: first come, first served), the worst of 3 runs.
- **slots**: {SLOTS_WAITERS} copies of `lockrun --wait forever --slots {SLOTS} --key K -- stamp ...`, a
  {JOB_MS} ms job, started together; the wall time until the last one is reaped against the ideal of
  every slot busy all the time ({SLOTS_WAITERS} × {JOB_MS} ms / {SLOTS}), the Redis script calls per
  acquisition as for the queue, and the most jobs running at once by their CLOCK_MONOTONIC
  stamps. Medians of 3 runs (the most: of all 3).
"""
    text += kept_sections(opts.out)
    with open(opts.out, "w") as f:
        f.write(text)
    print(table)
    print()
    print("true alone: %.2f ms median; lockrun --version: %.2f ms; %s" % (
        true_alone[0], startup[0], versions or etcd_line[2:]))
    print("machine: %(nproc)s CPUs, %(cpu)s, Linux %(kernel)s, redis %(redis)s, load %(load)s" % info)
    print("wrote %s in %.0f s" % (opts.out, elapsed))


if __name__ == "__main__":
    main()
