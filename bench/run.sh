#!/usr/bin/env bash
# Benchmarks lockrun against flock(1), and against `etcdctl lock` when etcd is
# installed, on this machine and writes BENCHMARKS.md, ending with one run
# step by step (bench/breakdown.py).
#
#   bench/run.sh                 # full run: about 4 minutes on 2 CPUs (3 without
#                                # etcd), plus the release build if it is stale
#   bench/run.sh --no-etcd       # leave etcdctl lock out (or BENCH_NO_ETCD=1)
#   bench/run.sh --runs 100      # fewer overhead runs (other options go to bench.py)
#   bench/run.sh --only slots    # one case (60 waiters on 3 slots), printed;
#                                # BENCHMARKS.md is left alone
#   bench/run.sh --only overhead --baseline /tmp/old/lockrun
#                                # `-- true` only, this build against another in
#                                # the same rounds (how to judge a change)
#   bench/run.sh --only handoff --baseline /tmp/old/lockrun
#                                # the hand-off (3 and 8 contenders), the same way
#
# Builds the release binaries (the static musl one, measured by default, and
# the dynamic glibc one beside it), starts a throwaway redis-server on a unix socket,
# a free loopback TCP port and a TLS port (a throwaway CA's certificate) in a
# temporary directory (never the Redis on 6379), runs bench/bench.py, and removes
# the server and the directory on exit, however it exits. Needs cargo,
# redis-server (built with TLS), flock, openssl and python3, and
# for the static build the rustup target x86_64-unknown-linux-musl and
# musl-tools (scripts/dist installs both).
#
# When `etcd` and `etcdctl` are on PATH (Debian: apt-get install etcd-server
# etcd-client), it also starts a throwaway single-member etcd with its data
# directory in the same temporary directory and its client and peer URLs on
# free 127.0.0.1 ports picked by the kernel (not 2379/2380), and measures
# `etcdctl --endpoints=... lock NAME -- CMD` as a third tool. This script
# installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'bench: %s\n' "$*" >&2; }
need() {
  command -v "$1" >/dev/null 2>&1 || { say "needs $1 ($2)"; exit 1; }
}
need cargo "https://rustup.rs"
need rustc "https://rustup.rs"
need redis-server "apt-get install redis-server"
need flock "apt-get install util-linux"
need python3 "apt-get install python3"
need openssl "apt-get install openssl"

# --no-etcd is ours; every other argument goes to bench.py.
no_etcd=${BENCH_NO_ETCD:-}
only=
args=()
for arg in "$@"; do
  case "$arg" in
    --no-etcd) no_etcd=1 ;;
    # One case, printed: BENCHMARKS.md, breakdown included, is left alone.
    --only | --only=*) only=1; args+=("$arg") ;;
    *) args+=("$arg") ;;
  esac
done
# ETCD_* variables configure etcd and ETCDCTL_* ones etcdctl: the throwaway
# server and the measured client get only what this script sets.
while IFS= read -r var; do
  unset "$var"
done < <(compgen -e | grep -E '^ETCD(CTL)?_' || true)

work=$(mktemp -d "${TMPDIR:-/tmp}/lockrun-bench.XXXXXX")
redis_pid=
etcd_pid=
bench_pid=
# SIGTERM, then SIGKILL if the process is still there after 5 s.
stop() {
  kill "$1" 2>/dev/null || return 0
  for _ in $(seq 50); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
cleanup() {
  # bench.py kills what it started when it gets SIGTERM.
  if [ -n "$bench_pid" ]; then stop "$bench_pid"; fi
  if [ -n "$redis_pid" ]; then stop "$redis_pid"; fi
  if [ -n "$etcd_pid" ]; then stop "$etcd_pid"; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Build first: compiling while measuring would skew every figure. The
# static musl binary is what ships (scripts/dist) and is the headline; the
# dynamic glibc one (`cargo build --release`) is measured beside it.
static_target=x86_64-unknown-linux-musl
if ! rustup target list --installed 2>/dev/null | grep -qx "$static_target" \
  || ! command -v musl-gcc >/dev/null 2>&1; then
  say "needs the static build's tools: rustup target add $static_target; apt-get install musl-tools"
  exit 1
fi
say "building lockrun (release: static musl, and dynamic glibc)"
cargo build --release --quiet --target "$static_target"
cargo build --release --quiet
target_dir=${CARGO_TARGET_DIR:-target}
case "$target_dir" in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
lockrun="$target_dir/$static_target/release/lockrun"
lockrun_dynamic="$target_dir/release/lockrun"
rustc -O -C panic=abort --edition 2021 bench/stamp.rs -o "$work/stamp"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
redis_ready() {
  python3 - "$1" <<'EOF' >/dev/null 2>&1
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(1)
s.connect(sys.argv[1])
s.sendall(b"PING\r\n")
sys.exit(0 if s.recv(16).startswith(b"+PONG") else 1)
EOF
}

# await_ready PID TRIES PAUSE CHECK...: polls CHECK until it succeeds, PID
# dies, or TRIES polls PAUSE seconds apart have passed; fails unless ready.
await_ready() {
  local pid=$1 tries=$2 pause=$3
  shift 3
  for _ in $(seq "$tries"); do
    if "$@"; then return 0; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep "$pause"
  done
  "$@"
}

# The TLS run's certificates: a throwaway CA and a P-256 certificate for
# 127.0.0.1, the curve BENCHMARKS.md advises.
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -days 2 -subj /CN=lockrun-bench-CA \
  -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req "${ec[@]}" -subj /CN=localhost -keyout "$work/server.key" \
  -out "$work/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$work/san.ext"
openssl x509 -req -in "$work/server.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" \
  -CAcreateserial -days 2 -extfile "$work/san.ext" -out "$work/server.pem" 2>/dev/null

# Another process may take the free port before redis-server binds it: retry.
socket="$work/redis.sock"
for attempt in 1 2 3 4 5; do
  port=$(free_port)
  tls_port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --unixsocket "$socket" \
    --tls-port "$tls_port" --tls-cert-file "$work/server.pem" \
    --tls-key-file "$work/server.key" --tls-ca-cert-file "$work/ca.pem" \
    --tls-auth-clients no \
    --unixsocketperm 700 --save '' --appendonly no --dir "$work" \
    --logfile "$work/redis.log" --daemonize no </dev/null >/dev/null 2>&1 &
  redis_pid=$!
  if await_ready "$redis_pid" 100 0.05 redis_ready "$socket"; then break; fi
  stop "$redis_pid"
  redis_pid=
  say "redis-server did not start on port $port (attempt $attempt)"
done
[ -n "$redis_pid" ] || { say "could not start redis-server; see above"; exit 1; }
say "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on 127.0.0.1:$port (TLS: $tls_port) and $socket"

# etcdctl lock is a third point of comparison when etcd is installed.
etcd_args=()
etcd_note=
etcd_ready() {
  ETCDCTL_API=3 timeout 5 etcdctl --endpoints="$1" --dial-timeout=1s \
    --command-timeout=2s endpoint health >/dev/null 2>&1
}
if [ -n "$no_etcd" ]; then
  etcd_note="etcdctl lock: left out of this run (--no-etcd)."
elif ! command -v etcd >/dev/null 2>&1 || ! command -v etcdctl >/dev/null 2>&1; then
  etcd_note="etcdctl lock: etcd and etcdctl are not both installed on this machine, so not measured (Debian: apt-get install etcd-server etcd-client)."
else
  # Same port race as for redis-server: retry with other ports.
  for attempt in 1 2 3 4 5; do
    etcd_port=$(free_port)
    peer_port=$(free_port)
    [ "$etcd_port" != "$peer_port" ] || continue
    endpoint="http://127.0.0.1:$etcd_port"
    rm -rf "$work/etcd"
    etcd --name lockrun-bench --data-dir "$work/etcd" \
      --listen-client-urls "$endpoint" --advertise-client-urls "$endpoint" \
      --listen-peer-urls "http://127.0.0.1:$peer_port" \
      --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
      --initial-cluster "lockrun-bench=http://127.0.0.1:$peer_port" \
      --initial-cluster-state new --initial-cluster-token "lockrun-bench-$$" \
      --logger zap --log-outputs stderr --log-level warn \
      </dev/null >/dev/null 2>"$work/etcd.log" &
    etcd_pid=$!
    if await_ready "$etcd_pid" 50 0.1 etcd_ready "$endpoint"; then break; fi
    stop "$etcd_pid"
    etcd_pid=
    say "etcd did not start on port $etcd_port (attempt $attempt); its log ends:"
    tail -n 5 "$work/etcd.log" >&2 || true
  done
  [ -n "$etcd_pid" ] || { say "could not start etcd; see above, or run with --no-etcd"; exit 1; }
  etcd_version=$(etcd --version | sed -n 's/^etcd Version: //p')
  etcdctl_version=$(ETCDCTL_API=3 etcdctl version | sed -n 's/^etcdctl version: //p')
  say "etcd $etcd_version (etcdctl $etcdctl_version) on $endpoint"
  etcd_args=(--etcd-endpoint "$endpoint" --etcd-version "$etcd_version" \
    --etcdctl-version "$etcdctl_version")
fi
if [ -n "$etcd_note" ]; then
  say "$etcd_note"
  etcd_args=(--etcd-note "$etcd_note")
fi

# In the background, so that a signal to this script is handled at once
# (bash runs traps only between commands, and `wait` is interruptible).
python3 bench/bench.py --lockrun "$lockrun" --lockrun-dynamic "$lockrun_dynamic" --stamp "$work/stamp" --port "$port" \
  --socket "$socket" --tls-port "$tls_port" --ca "$work/ca.pem" --work "$work" \
  --out BENCHMARKS.md "${etcd_args[@]}" \
  ${args[@]+"${args[@]}"} &
bench_pid=$!
status=0
wait "$bench_pid" || status=$?
bench_pid=
# Then one run step by step (bench/breakdown.py), at the end of the same file.
if [ "$status" -eq 0 ] && [ -z "$only" ]; then
  say "one run, step by step (bench/breakdown.py)"
  {
    printf '\n## One run, step by step\n\n'
    printf '`bench/breakdown.sh` (bench/breakdown.py), right after the figures above:\n\n'
    python3 bench/breakdown.py --lockrun "$lockrun"
  } >>BENCHMARKS.md &
  bench_pid=$!
  wait "$bench_pid" || status=$?
  bench_pid=
fi
exit "$status"
