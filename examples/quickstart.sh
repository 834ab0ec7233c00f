#!/usr/bin/env bash
# lockrun's quick start, for a Debian or Ubuntu machine with Rust 1.88 or
# later (rustup; see README.md, Installation):
# build lockrun, start a throwaway redis-server, and run commands under a
# lock held in it.
#
# Installs Debian's redis-server package if redis-server is missing (with
# sudo when not root). The server this starts listens only on a unix socket
# in a temporary directory, keeps nothing on disk, and is stopped and
# removed when the script exits.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold= plain=; fi
say() { printf '\n%s%s%s\n' "$bold" "$*" "$plain"; }

if ! command -v redis-server >/dev/null 2>&1; then
  say "Installing redis-server (Debian package)"
  sudo=
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/lockrun-quickstart.XXXXXX")
redis_pid=
holder_pid=
cleanup() {
  [ -z "$holder_pid" ] || kill "$holder_pid" 2>/dev/null || true
  [ -z "$redis_pid" ] || { kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; } || true
  rm -rf "$dir"
}
trap cleanup EXIT

say "Starting a throwaway redis-server on $dir/redis.sock"
redis-server --port 0 --unixsocket "$dir/redis.sock" --unixsocketperm 700 \
  --save '' --appendonly no --dir "$dir" --logfile "$dir/redis.log" &
redis_pid=$!
for _ in $(seq 100); do
  [ -S "$dir/redis.sock" ] && break
  sleep 0.1
done
if ! [ -S "$dir/redis.sock" ]; then
  cat "$dir/redis.log" >&2
  echo "quickstart: redis-server did not start" >&2
  exit 1
fi

say "Building lockrun (about a minute the first time)..."
cargo build
target=${CARGO_TARGET_DIR:-target}
case $target in /*) ;; *) target=$PWD/$target ;; esac
lockrun=$target/debug/lockrun
url=unix://$dir/redis.sock

# Show each command as it would be typed, then run it.
run() {
  local shown=() arg
  for arg in "$@"; do
    case $arg in
      "$lockrun") arg=lockrun ;;
      "$url") arg=unix://$dir/redis.sock ;;
      *[!A-Za-z0-9_./:=@+-]*) arg="'$arg'" ;;
    esac
    shown+=("$arg")
  done
  printf '$ %s\n' "${shown[*]}"
  "$@"
}

say "Run a command under the lock; it gets a fencing token"
run "$lockrun" --redis "$url" --key demo -- sh -c 'echo "fencing token $LOCKRUN_FENCING_TOKEN"'

say "While one run holds the lock for 3 seconds..."
"$lockrun" --redis "$url" --key demo -- sleep 3 &
holder_pid=$!
until "$lockrun" status --redis "$url" --key demo >/dev/null; do sleep 0.05; done
run "$lockrun" status --redis "$url" --key demo

say "...a second run does not start its command, and exits 75"
status=0
run "$lockrun" --redis "$url" --key demo -- echo "not printed" || status=$?
echo "exit status $status"

say "...and one that waits starts the moment the lock is released"
run "$lockrun" --redis "$url" --key demo --wait 1m -- sh -c 'echo "fencing token $LOCKRUN_FENCING_TOKEN"'
wait "$holder_pid"
holder_pid=

say "Done. Next: man ./man/lockrun.1, and examples/ for cron, systemd and CI."
