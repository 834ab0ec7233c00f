#!/usr/bin/env bash
# Where one `lockrun -- true` spends its time: each step (perf trace), CPU time
# and page faults (perf stat) and instructions per run (perf or callgrind),
# against a throwaway redis-server on a unix socket in a temporary directory.
#
#   bench/breakdown.sh              # builds the static release binary (what
#                                   # ships, as bench/run.sh measures), 30 runs
#   bench/breakdown.sh --runs 100   # other options go to bench/breakdown.py
#
# Needs cargo, redis-server, python3; perf (trace: root) and valgrind for the
# figures that use them (each is left out, with a note, when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --target x86_64-unknown-linux-musl
target_dir=${CARGO_TARGET_DIR:-target}
exec python3 bench/breakdown.py \
  --lockrun "$target_dir/x86_64-unknown-linux-musl/release/lockrun" "$@"
