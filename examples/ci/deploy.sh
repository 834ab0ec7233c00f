#!/bin/sh
# Deploy from CI, one pipeline at a time per environment.
#
# A pipeline that starts while another one deploys to the same environment
# waits for it (--wait), and starts the moment the running deploy releases
# the lock. The wait has a bound: if a deploy hangs, pipelines would pile up
# behind it and hold every runner; after 15 minutes this gives up with exit 75
# and says why. --timeout stops a deploy that hangs instead, so the bound on
# the wait means something.
#
# When CI cancels the job, the runner's SIGTERM reaches lockrun, which passes
# it on to the deploy and releases the lock once the deploy has exited.
#
# Usage: deploy.sh ENVIRONMENT [ARG]...
# Needs lockrun on PATH, LOCKRUN_REDIS_URL and (from the CI secret store, so
# it is never on a command line) LOCKRUN_REDIS_PASSWORD.
set -eu

env=${1:?usage: deploy.sh ENVIRONMENT [ARG]...}
shift

status=0
# --supersede: a newer push that starts waiting ends this one's wait (exit 75),
# so three quick pushes deploy the first and the last; a running deploy goes on.
lockrun --key "deploy-$env" --wait 15m --supersede --timeout 45m -- ./scripts/deploy.sh "$env" "$@" || status=$?

case $status in
0) ;;
75) echo "deploy.sh: not deploying to $env: a newer push took over, or another deploy still held the lock after 15 minutes" >&2 ;;
76) echo "deploy.sh: lost the deploy lock for $env (Redis unreachable?); the deploy was stopped part way" >&2 ;;
124) echo "deploy.sh: the deploy to $env ran longer than 45 minutes and was stopped" >&2 ;;
esac
exit "$status"
