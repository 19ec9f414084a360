-- Farm-wide per-host politeness.
--
-- hosts has a row for every host that has a minimum interval between job
-- starts (the producer creates it before assigning the host's first job).
-- Claim stamps last_started_at in the statement that starts the job, so the
-- producer can space starts exactly: it assigns such a host's next job only
-- once none of its jobs waits unstarted and the interval since the last start
-- has passed.
CREATE TABLE hosts (
    host            text        PRIMARY KEY,
    last_started_at timestamptz NOT NULL DEFAULT '-infinity'
) WITH (fillfactor = 50);

-- Assignment per host: the next pending jobs of one host by priority, then
-- age, and (loose index scan) the distinct hosts that have pending jobs.
CREATE INDEX jobs_pending_host_idx ON jobs (host, priority DESC, id) WHERE state = 'pending';
