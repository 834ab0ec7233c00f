#!/usr/bin/env bash
# Benchmarks lockrun against flock(1) on this machine and writes BENCHMARKS.md.
#
#   bench/run.sh                 # full run: about 2 minutes on 2 CPUs
#   bench/run.sh --runs 100      # fewer overhead runs (options go to bench.py)
#
# Builds the release binary, starts a throwaway redis-server on a unix socket
# and a free loopback TCP port in a temporary directory (never the Redis on
# 6379), runs bench/bench.py, and removes the server and the directory on
# exit, however it exits. Needs cargo, redis-server, flock and python3.
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

work=$(mktemp -d "${TMPDIR:-/tmp}/lockrun-bench.XXXXXX")
redis_pid=
bench_pid=
cleanup() {
  # bench.py kills what it started when it gets SIGTERM.
  if [ -n "$bench_pid" ]; then
    kill "$bench_pid" 2>/dev/null || true
    wait "$bench_pid" 2>/dev/null || true
  fi
  if [ -n "$redis_pid" ]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Build first: compiling while measuring would skew every figure.
say "building lockrun (release)"
cargo build --release --quiet
target_dir=${CARGO_TARGET_DIR:-target}
case "$target_dir" in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
lockrun="$target_dir/release/lockrun"
rustc -O -C panic=abort --edition 2021 bench/stamp.rs -o "$work/stamp"

# etcdctl lock is a third point of comparison when installed; it needs an
# etcd server as well, which this script does not start.
if command -v etcdctl >/dev/null 2>&1; then
  etcd_note="etcdctl lock: etcdctl is installed but not measured (it needs an etcd server)."
else
  etcd_note="etcdctl lock: not installed on this machine, so not measured."
fi
say "$etcd_note"

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

# Another process may take the free port before redis-server binds it: retry.
socket="$work/redis.sock"
for attempt in 1 2 3 4 5; do
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --unixsocket "$socket" \
    --unixsocketperm 700 --save '' --appendonly no --dir "$work" \
    --logfile "$work/redis.log" --daemonize no </dev/null >/dev/null 2>&1 &
  redis_pid=$!
  for _ in $(seq 100); do
    if redis_ready "$socket"; then break; fi
    kill -0 "$redis_pid" 2>/dev/null || break
    sleep 0.05
  done
  if redis_ready "$socket"; then break; fi
  kill "$redis_pid" 2>/dev/null || true
  wait "$redis_pid" 2>/dev/null || true
  redis_pid=
  say "redis-server did not start on port $port (attempt $attempt)"
done
[ -n "$redis_pid" ] || { say "could not start redis-server; see above"; exit 1; }
say "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on 127.0.0.1:$port and $socket"

# In the background, so that a signal to this script is handled at once
# (bash runs traps only between commands, and `wait` is interruptible).
python3 bench/bench.py --lockrun "$lockrun" --stamp "$work/stamp" --port "$port" \
  --socket "$socket" --work "$work" --out BENCHMARKS.md --etcd-note "$etcd_note" "$@" &
bench_pid=$!
status=0
wait "$bench_pid" || status=$?
bench_pid=
exit "$status"
