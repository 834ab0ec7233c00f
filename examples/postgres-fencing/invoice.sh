#!/bin/sh
# A billing job that writes only while its fencing token is the newest one.
#
#   lockrun --key nightly-billing -- /path/to/postgres-fencing/invoice.sh
#
# It works from any directory: it reads schema.sql from its own directory
# (through a symlink too).
#
# A lease can lapse while a job is stalled (a GC pause, a frozen VM, a
# stopped process) and a second run can take the lock meanwhile. When the
# first job wakes up it still believes it holds the lock. The database
# closes that gap: the fence check and the write are one statement, so a
# write carrying an older token than the last writer's changes nothing.
#
# Environment: DATABASE_URL (default postgresql://postgres@127.0.0.1:5432/postgres),
# BILLING_JOB (default nightly), BILLING_WHO (default host:pid).
# Exit status: 0 charged, 3 rejected as stale, other: psql failed.
set -eu

: "${LOCKRUN_FENCING_TOKEN:?run this under lockrun, which sets LOCKRUN_FENCING_TOKEN}"
database=${DATABASE_URL:-postgresql://postgres@127.0.0.1:5432/postgres}
job=${BILLING_JOB:-nightly}
who=${BILLING_WHO:-$(hostname):$$}

here=$(dirname "$(readlink -f "$0")")
psql "$database" -X -q -v ON_ERROR_STOP=1 -f "$here/schema.sql"

charged=$(psql "$database" -X -q -At -v ON_ERROR_STOP=1 \
    -v fence="$LOCKRUN_FENCING_TOKEN" -v job="$job" -v who="$who" <<'SQL'
INSERT INTO billing_fence (job, last_fence) VALUES (:'job', 0) ON CONFLICT (job) DO NOTHING;
-- Take the fence and charge in one statement: both happen, or neither.
WITH fence AS (
    UPDATE billing_fence SET last_fence = :fence
    WHERE job = :'job' AND last_fence < :fence
    RETURNING job
), charged AS (
    INSERT INTO invoices (job, fence, charged_by)
    SELECT job, :fence, :'who' FROM fence
    RETURNING 1
)
SELECT count(*) FROM charged;
SQL
)

if [ "$charged" != 1 ]; then
    echo "invoice.sh: fencing token $LOCKRUN_FENCING_TOKEN is stale: a newer holder has written; nothing charged" >&2
    exit 3
fi
echo "invoice.sh: charged $job with fencing token $LOCKRUN_FENCING_TOKEN"
