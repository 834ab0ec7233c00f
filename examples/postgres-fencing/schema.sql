-- Quiet the "already exists" notices on every run after the first.
SET client_min_messages = warning;

-- The protected resource: a billing database that remembers the newest
-- fencing token that wrote to it, and refuses anything older.
CREATE TABLE IF NOT EXISTS billing_fence (
    job        text   PRIMARY KEY,
    -- The highest LOCKRUN_FENCING_TOKEN that has written for this job.
    last_fence bigint NOT NULL
);

CREATE TABLE IF NOT EXISTS invoices (
    id         bigserial   PRIMARY KEY,
    job        text        NOT NULL,
    fence      bigint      NOT NULL,
    charged_by text        NOT NULL,
    charged_at timestamptz NOT NULL DEFAULT now()
);
