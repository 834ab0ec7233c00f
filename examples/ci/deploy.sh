#!/bin/sh
# Deploy from CI, one pipeline at a time per environment.
#
# A pipeline that starts while another one deploys to the same environment
# waits for it (--wait), and starts the moment the running deploy releases
# the lock. The wait has a bound: if a deploy hangs, pipelines would pile up
# behind it and hold every runner; after 15 minutes this gives up with exit 75
# and says why. A pipeline whose wait a newer push ended (--supersede) exits
# 79 instead: nothing is stuck, the newer push deploys. --timeout stops a deploy that hangs instead, so the bound on
# the wait means something.
#
# When CI cancels the job it signals this script (GitHub Actions: SIGINT,
# then SIGTERM 7.5 s later, then SIGKILL). A signal that stops only this
# shell would leave lockrun and the deploy running without it, holding the
# lock. So lockrun runs in the background and this script waits for it: on
# SIGINT, SIGTERM or SIGHUP the trap passes the signal to lockrun, which
# passes it to the deploy, keeps the lock while the deploy shuts down,
# releases it once the deploy has exited, and ends as the deploy ended;
# this script then exits with the shell's status for that: 130 for a
# deploy that SIGINT (a cancel, or Ctrl-C) ended, 143 for SIGTERM. A shell
# starts a background job with SIGINT ignored; lockrun gives the deploy
# SIGINT back, so that it can act on the one passed on. A runner that
# signals the whole process group (as Ctrl-C does) reaches lockrun directly
# as well, so the deploy may get the signal twice. SIGKILL cannot be passed
# on: if the runner kills only this script, lockrun and the deploy carry on
# to the end (at most --timeout) and then release the lock. As for any
# background job, the deploy's stdin is /dev/null.
#
# Usage: deploy.sh ENVIRONMENT [ARG]...
# Needs lockrun on PATH, the Redis server (LOCKRUN_REDIS_URL, or redis in the
# runner's /etc/lockrun.conf) and (from the CI secret store, so it is never on
# a command line) LOCKRUN_REDIS_PASSWORD.
set -eu

env=${1:?usage: deploy.sh ENVIRONMENT [ARG]...}
shift

# --supersede: a newer push that starts waiting ends this one's wait (exit 79),
# so three quick pushes deploy the first and the last; a running deploy goes on.
lockrun --key "deploy-$env" --wait 15m --supersede --timeout 45m -- ./scripts/deploy.sh "$env" "$@" &
lockrun_pid=$!
for signal in INT TERM HUP; do
    trap "kill -$signal $lockrun_pid 2>/dev/null" "$signal"
done
# A trapped signal ends `wait` early, with lockrun still running: wait again
# until it has exited, and keep its exit status.
while :; do
    status=0
    wait "$lockrun_pid" || status=$?
    kill -0 "$lockrun_pid" 2>/dev/null || break
done

case $status in
0) ;;
75) echo "deploy.sh: not deploying to $env: another deploy still held the lock after 15 minutes (stuck?)" >&2 ;;
79) echo "deploy.sh: not deploying to $env: a newer push took over and deploys instead" >&2 ;;
76) echo "deploy.sh: lost the deploy lock for $env (Redis unreachable?); the deploy was stopped part way" >&2 ;;
124) echo "deploy.sh: the deploy to $env ran longer than 45 minutes and was stopped" >&2 ;;
esac
exit "$status"
