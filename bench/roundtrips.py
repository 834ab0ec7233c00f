#!/usr/bin/env python3
"""Round trips of one lockrun run over a slow link, on each path users take.

Every path runs lockrun through a delay proxy on loopback (`DelayProxy`)
that holds every chunk for half the round trip time each way, and a new
connection's first bytes for one more round trip (the TCP handshake, which
a proxy in user space cannot delay itself). It counts, for the connections
opened while lockrun runs:

- connects: TCP connections lockrun opened;
- flights: bursts from lockrun to Redis, each answered before the next.
  Bursts to several servers at once (a quorum's fan-out) are one flight;
  a burst never answered (a TLS close_notify at exit) is not counted.

and reports them with the run's wall time beside the path's floor, which
BENCHMARKS.md states and justifies: one connect (a quorum's three open at
once), the TLS handshake (one flight with TLS 1.3), one flight to take the
lease and one to release it.

    python3 bench/roundtrips.py --lockrun target/release/lockrun --rtt 20ms
    python3 bench/roundtrips.py --rtt 1ms --rtt 20ms --json out.json
    python3 bench/roundtrips.py --serve 6380 --rtt 500ms   # a slow link to :6380

It starts throwaway redis-servers on free loopback ports in a temporary
directory (never the one on 6379) and removes them when it exits; it needs
redis-server and openssl. The integration test `roundtrips` runs it at a
short RTT and holds every path to its floor.
"""

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

PASSWORD = "bench-password"
REDIS_CLI = "redis-cli"
TRACE = False
USER, USER_PASSWORD = "bench-user", "bench-user-password"


def slot(name):
    """The cluster slot of lock `name` (its keys' hash tag): CRC16/XMODEM."""
    crc = 0
    for byte in name.encode():
        crc ^= byte << 8
        for _ in range(8):
            crc = (crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1
        crc &= 0xFFFF
    return crc % 16384


# Locks whose slots are on the cluster's first node (0-5460), the seed, and
# on its last (10923-16383).
SEED_KEY = next(f"bench-rt-{i}" for i in range(1000) if slot(f"bench-rt-{i}") <= 5460)
OTHER_KEY = next(f"bench-rt-{i}" for i in range(1000) if slot(f"bench-rt-{i}") >= 10923)


class DelayProxy:
    """A TCP proxy on 127.0.0.1 that delays each direction by rtt/2, and
    counts connects and flights, in an asyncio loop on a thread of its own.
    """

    def __init__(self, rtt):
        self.set_rtt(rtt)
        self.ports = {}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.opened = 0
        self.reset()
        # Nothing counts until a measured run begins: a sentinel's own
        # connections to its primary, opened before, never do.
        self.counting = False

    def set_rtt(self, rtt):
        """The round trip of chunks read from now on."""
        self.half = rtt / 2
        self.rtt = rtt

    def port_for(self, upstream_port):
        """The proxy's port forwarding to 127.0.0.1:upstream_port, made
        at the first ask."""
        if upstream_port not in self.ports:
            self.ports[upstream_port] = self.listen(upstream_port)
        return self.ports[upstream_port]

    def reset(self):
        """Starts counting afresh: only connections accepted from now on
        count (a sentinel's own connections to its primary never do)."""
        self.connects = 0
        self.flights = []  # one dict per flight: {"answered": bool}
        self.outstanding = set()  # connections whose burst awaits an answer
        self.events = []  # (time, connection number, direction, bytes), for --trace
        self.counting = True

    def counts(self):
        return {
            "connects": self.connects,
            "flights": sum(1 for f in self.flights if f["answered"]),
            "unanswered": sum(1 for f in self.flights if not f["answered"]),
        }

    def listen(self, upstream_port):
        """A new listening port forwarding to 127.0.0.1:upstream_port."""
        future = asyncio.run_coroutine_threadsafe(self._listen(upstream_port), self.loop)
        return future.result(10)

    async def _listen(self, upstream_port):
        async def accepted(reader, writer):
            await self._serve(reader, writer, upstream_port)

        server = await asyncio.start_server(accepted, "127.0.0.1", 0)
        return server.sockets[0].getsockname()[1]

    async def _serve(self, client_r, client_w, upstream_port):
        counted = self.counting
        if counted:
            self.connects += 1
        # Its number, for --trace: never reused, as a connection of an
        # earlier run may still be closing.
        self.opened += 1
        conn = self.opened
        # The connect's round trip: nothing reaches Redis before it is over.
        ready = self.loop.time() + self.rtt
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", upstream_port)
        except OSError:
            client_w.close()
            return
        for w in (client_w, server_w):
            w.transport.get_extra_info("socket").setsockopt(
                socket.IPPROTO_TCP, socket.TCP_NODELAY, 1
            )

        def sent(chunk):
            if not counted:
                return
            self.events.append((self.loop.time(), conn, ">", len(chunk)))
            if not self.outstanding:
                self.flights.append({"answered": False, "members": set()})
            self.outstanding.add(conn)
            self.flights[-1]["members"].add(conn)

        def answered(chunk):
            if not counted:
                return
            self.events.append((self.loop.time(), conn, "<", len(chunk)))
            if conn not in self.outstanding:
                return
            self.outstanding.discard(conn)
            for flight in reversed(self.flights):
                if conn in flight["members"]:
                    flight["answered"] = True
                    break

        def gone():
            self.outstanding.discard(conn)

        await asyncio.gather(
            self._pipe(client_r, server_w, ready, sent, gone),
            self._pipe(server_r, client_w, 0, None, gone, answered),
            return_exceptions=True,
        )

    async def _pipe(self, reader, writer, ready, on_read, on_eof, on_deliver=None):
        """Copies reader to writer, each chunk half a round trip late (and
        not before `ready`), in order."""
        queue = asyncio.Queue()

        async def deliver():
            while True:
                due, chunk = await queue.get()
                delay = due - self.loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if chunk is None:
                    break
                if on_deliver:
                    on_deliver(chunk)
                writer.write(chunk)
                try:
                    await writer.drain()
                except OSError:
                    break
            try:
                writer.close()
            except OSError:
                pass

        task = asyncio.ensure_future(deliver())
        while True:
            try:
                chunk = await reader.read(65536)
            except OSError:
                chunk = b""
            now = self.loop.time()
            due = max(now, ready) + self.half
            if not chunk:
                on_eof()
                await queue.put((due, None))
                break
            if on_read:
                on_read(chunk)
            await queue.put((due, chunk))
        await task


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openssl(workdir, *args):
    subprocess.run(
        ["openssl", *args], cwd=workdir, check=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def certificates(workdir):
    """A private CA, a P-256 server certificate for 127.0.0.1 (the curve
    BENCHMARKS.md advises) and a client certificate for mutual TLS."""
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl(workdir, "req", "-x509", *key, "-days", "2", "-subj", "/CN=bench-CA",
            "-keyout", "ca.key", "-out", "ca.pem")
    with open(os.path.join(workdir, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl(workdir, "req", *key, "-subj", "/CN=localhost", "-keyout", "server.key",
            "-out", "server.csr")
    openssl(workdir, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey",
            "ca.key", "-CAcreateserial", "-days", "2", "-extfile", "san.ext",
            "-out", "server.pem")
    openssl(workdir, "req", *key, "-subj", "/CN=lockrun-bench", "-keyout", "client.key",
            "-out", "client.csr")
    # Version 3, which rustls needs: an -extfile makes one.
    with open(os.path.join(workdir, "client.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
                "extendedKeyUsage=clientAuth\n")
    openssl(workdir, "x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey",
            "ca.key", "-CAcreateserial", "-days", "2", "-extfile", "client.ext",
            "-out", "client.pem")


class Servers:
    """The throwaway servers: `plain` (TCP and TLS, no password), `secured`
    (TCP and TLS, a password and an ACL user), `mutual` (TLS asking for the
    client's certificate), two more plain ones for the quorum."""

    def __init__(self, workdir, redis_server):
        self.workdir = workdir
        self.redis_server = redis_server
        self.sentinel_ports = {}
        self.cluster_urls = {}
        self.procs = []
        certificates(workdir)
        self.ca = os.path.join(workdir, "ca.pem")
        tls = (
            f"tls-cert-file {workdir}/server.pem\ntls-key-file {workdir}/server.key\n"
            f"tls-ca-cert-file {self.ca}\ntls-auth-clients no\n"
        )
        self.plain = self._start("plain", tls)
        self.secured = self._start(
            "secured",
            tls + f"requirepass {PASSWORD}\n"
            f"user {USER} on >{USER_PASSWORD} ~* &* +@all\n",
        )
        self.mutual = self._start(
            "mutual", tls.replace("tls-auth-clients no", "tls-auth-clients yes"))
        self.others = [self._start(f"quorum{i}", "") for i in (2, 3)]

    def _start(self, name, extra):
        port, tls_port = free_port(), free_port()
        tls = f"tls-port {tls_port}\n" if "tls-cert-file" in extra else ""
        self._spawn(name, port, tls + extra)
        auth = ["-a", PASSWORD] if "requirepass" in extra else []
        self._await_ping(port, auth)
        return {"port": port, "tls_port": tls_port, "auth": auth}

    def _spawn(self, name, port, config, *args):
        """redis-server on 127.0.0.1:port, without persistence, with the
        `config` lines and `args`."""
        conf = os.path.join(self.workdir, name + ".conf")
        with open(conf, "w") as f:
            f.write(
                f"bind 127.0.0.1\nport {port}\ndir {self.workdir}\nsave \"\"\n"
                f"appendonly no\nlogfile {self.workdir}/{name}.log\n" + config
            )
        self.procs.append(subprocess.Popen([self.redis_server, conf, *args]))

    def _await_ping(self, port, auth):
        for _ in range(200):
            ok = subprocess.run(
                [REDIS_CLI, "-p", str(port), *auth, "--no-auth-warning", "ping"],
                capture_output=True, text=True,
            )
            if ok.stdout.strip() == "PONG":
                return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {port} did not start (see {self.workdir})")

    def sentinel(self, primary_port, password=None):
        """A sentinel watching the primary at `primary_port` (the proxy's
        port for the server, so that the sentinel names that port), quorum
        1, started at the first ask: its port. With `password`, the
        primary's and the sentinel's own."""
        if primary_port in self.sentinel_ports:
            return self.sentinel_ports[primary_port]
        port = self.sentinel_ports[primary_port] = free_port()
        config = f"sentinel monitor bench 127.0.0.1 {primary_port} 1\n"
        if password:
            config += f"sentinel auth-pass bench {password}\nrequirepass {password}\n"
        self._spawn(f"sentinel-{port}", port, config, "--sentinel")
        return port

    def cluster(self, proxy, password=None):
        """A cluster of three primaries, started at the first ask, each
        announcing its proxy's port to clients (its bus stays direct): the
        URL of its first node, the seed, through the proxy. With
        `password`, another cluster, whose nodes ask for it."""
        if password in self.cluster_urls:
            return self.cluster_urls[password]
        auth = ["-a", password, "--no-auth-warning"] if password else []
        secured = f"requirepass {password}\nmasterauth {password}\n" if password else ""
        # The bus is on port + 10000 (cluster-port, to choose it, is new
        # in Redis 7).
        ports = []
        while len(ports) < 3:
            port = free_port()
            if port < 55535:
                ports.append(port)
        for node in ports:
            self._spawn(
                f"node-{node}", node,
                f"cluster-enabled yes\ncluster-config-file nodes-{node}.conf\n"
                f"cluster-announce-ip 127.0.0.1\ncluster-announce-port {proxy.port_for(node)}\n"
                f"cluster-announce-bus-port {node + 10000}\n" + secured,
            )
        for node in ports:
            self._await_ping(node, auth[:2])
        # Slots in thirds, in this order: the seed's are 0-5460.
        subprocess.run(
            [REDIS_CLI, *auth, "--cluster", "create",
             *(f"127.0.0.1:{node}" for node in ports), "--cluster-yes"],
            check=True, capture_output=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            info = subprocess.run([REDIS_CLI, "-p", str(ports[0]), *auth, "cluster", "info"],
                                  capture_output=True, text=True).stdout
            if "cluster_state:ok" in info:
                break
            time.sleep(0.1)
        login = f":{password}@" if password else ""
        url = f"redis+cluster://{login}127.0.0.1:{proxy.port_for(ports[0])}"
        self.cluster_urls[password] = url
        return url

    def cli(self, server, *args):
        subprocess.run(
            [REDIS_CLI, "-p", str(server["port"]), *server["auth"], "--no-auth-warning", *args],
            check=True, capture_output=True,
        )

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait()


# Each path: its name, its floor (flights after connect, connects), and how
# to run it: `args(proxied_port)` gives lockrun's arguments.
def paths(servers, proxy):
    s, p = servers.plain, servers.secured

    def port(server, tls=False):
        return proxy.port_for(server["tls_port"] if tls else server["port"])

    ca = ["--redis-ca-file", servers.ca]
    client = ["--redis-cert-file", os.path.join(servers.workdir, "client.pem"),
              "--redis-key-file", os.path.join(servers.workdir, "client.key")]
    run = ["--key", "bench-rt", "--", "true"]
    held = "bench-rt-held"
    return [
        # (name, flights floor, connects floor, lockrun args, before[, env])
        ("TCP", 2, 1, ["--redis", f"redis://127.0.0.1:{port(s)}", *run], None),
        ("TCP, password", 2, 1,
         ["--redis", f"redis://:{PASSWORD}@127.0.0.1:{port(p)}", *run], None),
        ("TCP, ACL user", 2, 1,
         ["--redis", f"redis://{USER}:{USER_PASSWORD}@127.0.0.1:{port(p)}", *run], None),
        ("TLS 1.3", 3, 1,
         ["--redis", f"rediss://127.0.0.1:{port(s, True)}", *ca, *run], None),
        ("TLS 1.3, password", 3, 1,
         ["--redis", f"rediss://:{PASSWORD}@127.0.0.1:{port(p, True)}", *ca, *run], None),
        ("TLS 1.3, ACL user", 3, 1,
         ["--redis", f"rediss://{USER}:{USER_PASSWORD}@127.0.0.1:{port(p, True)}", *ca, *run],
         None),
        # Mutual TLS: the client's certificate travels with its Finished.
        ("mutual TLS 1.3", 3, 1,
         ["--redis", f"rediss://127.0.0.1:{port(servers.mutual, True)}", *ca, *client, *run],
         None),
        # A run that may wait listens for its wake-up on the connection
        # it calls on (RESP3); uncontended, it takes the lock at once.
        ("--wait, TCP", 2, 1,
         ["--redis", f"redis://127.0.0.1:{port(s)}", "--wait", "10s", *run], None),
        ("--wait, TCP, password", 2, 1,
         ["--redis", f"redis://:{PASSWORD}@127.0.0.1:{port(p)}", "--wait", "10s", *run], None),
        # Finds the lock held, waits subscribed, is handed the lock when the
        # holder (on a direct connection) lets go: its acquire (the
        # subscription in the same write) and its release; the wake-up is
        # the server's. Wall time from the holder's release on.
        ("--wait, handed the lock", 2, 1,
         ["--redis", f"redis://127.0.0.1:{port(s)}", "--key", held, "--wait", "30s", "--",
          "true"], "handed"),
        # Asking a sentinel which server is the primary, then that server:
        # its ROLE travels with the acquire, and the sentinel is asked again
        # beside the release.
        ("Sentinel", 3, 2,
         lambda: ["--redis", f"redis+sentinel://127.0.0.1:"
                  f"{proxy.port_for(servers.sentinel(port(s)))}/bench", *run], None),
        # The sentinel's password and the primary's, each AUTH travelling
        # with its connection's first call.
        ("Sentinel, passwords", 3, 2,
         lambda: ["--redis", f"redis+sentinel://:{PASSWORD}@127.0.0.1:"
                  f"{proxy.port_for(servers.sentinel(port(p), PASSWORD))}/bench", *run], None,
         {"LOCKRUN_SENTINEL_PASSWORD": PASSWORD}),
        # The call goes to the seed, which serves it when the lock's slot
        # is its own, or answers MOVED with the node that does.
        ("Cluster, lock on the seed", 2, 1,
         lambda: ["--redis", servers.cluster(proxy), "--key", SEED_KEY, "--", "true"], None),
        ("Cluster, lock on another node", 3, 2,
         lambda: ["--redis", servers.cluster(proxy), "--key", OTHER_KEY, "--", "true"], None),
        # The AUTH travels with each node's first call: CLUSTER SLOTS on the
        # seed, the acquire on the other node.
        ("Cluster, password, lock on the seed", 2, 1,
         lambda: ["--redis", servers.cluster(proxy, PASSWORD), "--key", SEED_KEY, "--", "true"],
         None),
        ("Cluster, password, lock on another node", 3, 2,
         lambda: ["--redis", servers.cluster(proxy, PASSWORD), "--key", OTHER_KEY, "--",
                  "true"], None),
        ("quorum of 3", 2, 3,
         [arg for srv in [s, *servers.others]
          for arg in ("--redis", f"redis://127.0.0.1:{port(srv)}")] + run, None),
        ("busy (exit 75)", 1, 1,
         ["--redis", f"redis://127.0.0.1:{port(s)}", "--key", held, "--", "true"], "hold"),
        ("status", 1, 1,
         ["--redis", f"redis://127.0.0.1:{port(s)}", "status", "--key", held], "hold"),
        ("release --force", 1, 1,
         ["--redis", f"redis://127.0.0.1:{port(s)}", "release", "--force", "--key", held],
         "hold"),
        ("first run, scripts not loaded", 3, 1,
         ["--redis", f"redis://127.0.0.1:{port(s)}", *run], "flush"),
    ]


def measure(lockrun, servers, proxy, path, runs):
    name, floor, connects_floor, args, before = path[:5]
    env = {**os.environ, **path[5]} if len(path) > 5 else None
    # Sentinel and Cluster start their servers only when measured.
    args = args() if callable(args) else args
    plain_url = f"redis://127.0.0.1:{servers.plain['port']}"
    results = []
    # One run unmeasured first, so that the scripts are loaded: the first
    # run's own path flushes them again.
    for i in range(runs + 1):
        proxy.counting = False
        holder = None
        if before in ("hold", "handed"):
            # Handed: the holder lets go when its stdin closes.
            job = ["sh", "-c", "read x || true"] if before == "handed" else ["sleep", "30"]
            holder = subprocess.Popen(
                [lockrun, "--redis", plain_url, "--key", "bench-rt-held", "--ttl", "30s",
                 "--", *job],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            for _ in range(200):
                if subprocess.run(
                    [lockrun, "--redis", plain_url, "status", "--key", "bench-rt-held"],
                    capture_output=True,
                ).returncode == 0:
                    break
                time.sleep(0.02)
        if before == "flush":
            for srv in [servers.plain, servers.secured, *servers.others]:
                servers.cli(srv, "SCRIPT", "FLUSH")
        if i == 0 and before is None:
            # A quorum's servers vote only once they have been up for one
            # ttl: wait for the first run that takes the lock.
            deadline = time.monotonic() + 60
            while subprocess.run([lockrun, *args], capture_output=True,
                                 env=env).returncode != 0:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: no run took the lock within 60 s")
                time.sleep(0.5)
            continue
        proxy.reset()
        began = time.monotonic()
        if before == "handed":
            waiter = subprocess.Popen([lockrun, *args], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
            # In line and subscribed well before the holder lets go.
            time.sleep(0.3 + 6 * proxy.rtt)
            began = time.monotonic()
            holder.stdin.close()
            out, err = waiter.communicate()
            done = subprocess.CompletedProcess(waiter.args, waiter.returncode, out, err)
        else:
            done = subprocess.run([lockrun, *args], capture_output=True, text=True, env=env)
        wall = time.monotonic() - began
        # The proxy may still be delivering the last answer's accounting.
        time.sleep(proxy.half + 0.01)
        proxy.counting = False
        counts = proxy.counts()
        if holder:
            if holder.stdin and not holder.stdin.closed:
                holder.stdin.close()
            holder.terminate()
            holder.wait()
            subprocess.run([lockrun, "--redis", plain_url, "release", "--force", "--key",
                            "bench-rt-held"], capture_output=True)
        if i == 0 and before != "flush":
            continue
        counts.update(wall_ms=wall * 1000, status=done.returncode, stderr=done.stderr.strip())
        if TRACE:
            start = proxy.events[0][0] if proxy.events else 0
            for at, conn, way, size in proxy.events:
                print(f"  {(at - start) * 1000:8.2f} ms  connection {conn} {way} {size} bytes")
        results.append(counts)
    flights = [r["flights"] for r in results]
    return {
        "path": name,
        "flights": max(flights),
        "flights_min": min(flights),
        "floor": floor,
        "connects": max(r["connects"] for r in results),
        "connects_floor": connects_floor,
        "wall_ms": statistics.median(r["wall_ms"] for r in results),
        "statuses": sorted({r["status"] for r in results}),
        "stderr": results[-1]["stderr"],
    }


def duration(text):
    text = text.strip()
    if text.endswith("ms"):
        return float(text[:-2]) / 1000
    if text.endswith("s"):
        return float(text[:-1])
    raise argparse.ArgumentTypeError("a duration such as 20ms or 1s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lockrun", default="target/release/lockrun")
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    parser.add_argument("--redis-cli", default="redis-cli")
    parser.add_argument("--rtt", type=duration, action="append",
                        help="round trip time, repeatable [default: 20ms]")
    parser.add_argument("--runs", type=int, default=5, help="measured runs per path [5]")
    parser.add_argument("--only", help="the paths whose names contain this")
    parser.add_argument("--trace", action="store_true",
                        help="print each run's chunks: when, which connection, which way")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--serve", type=int, metavar="PORT",
                        help="only forward to 127.0.0.1:PORT at the first --rtt, printing the "
                        "proxy's port, until stdin closes (for tests)")
    opts = parser.parse_args()
    global REDIS_CLI, TRACE
    REDIS_CLI, TRACE = opts.redis_cli, opts.trace
    rtts = opts.rtt or [0.02]
    if opts.serve:
        proxy = DelayProxy(rtts[0])
        print(proxy.listen(opts.serve), flush=True)
        sys.stdin.read()
        return 0
    lockrun = os.path.abspath(opts.lockrun)
    workdir = tempfile.mkdtemp(prefix="lockrun-rt-")
    servers = None
    out = []
    try:
        servers = Servers(workdir, opts.redis_server)
        proxy = DelayProxy(rtts[0])
        for rtt in rtts:
            proxy.set_rtt(rtt)
            for path in paths(servers, proxy):
                if opts.only and opts.only not in path[0]:
                    continue
                result = measure(lockrun, servers, proxy, path, opts.runs)
                result["rtt_ms"] = rtt * 1000
                out.append(result)
                print(
                    f"{rtt * 1000:g} ms RTT | {result['path']} | flights {result['flights']}"
                    f" (floor {result['floor']}) | connects {result['connects']}"
                    f" (floor {result['connects_floor']}) | wall {result['wall_ms']:.0f} ms"
                    f" | exit {','.join(map(str, result['statuses']))}",
                    flush=True,
                )
    finally:
        if servers:
            servers.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
