-- Load samples for the dashboard's charts over the last hour: the queue's
-- counts and throughput, and each live node's load (the Chrome PSS sawtooth
-- of recycling). The leader producer's recorder appends a row set every few
-- seconds and prunes rows past the retention in bounded deletes, so these
-- tables stay small: about 720 queue rows and 720 rows per node an hour at
-- the default 5 s interval.

CREATE TABLE queue_samples (
    at            timestamptz PRIMARY KEY,
    pending       bigint      NOT NULL,
    queued        bigint      NOT NULL,
    processing    bigint      NOT NULL,
    -- Jobs that reached a final state with finished_at in (the previous
    -- sample's counted_until, this counted_until]. counted_until trails at by
    -- a moment, so a completion committed just after the sample's snapshot,
    -- with a finished_at just before it, is counted by the next sample
    -- rather than lost.
    completed     bigint      NOT NULL,
    failed        bigint      NOT NULL,
    canceled      bigint      NOT NULL,
    counted_until timestamptz NOT NULL
);

CREATE TABLE node_samples (
    at                      timestamptz      NOT NULL,
    node_id                 text             NOT NULL,
    state                   text             NOT NULL,
    capacity                integer          NOT NULL,
    busy_sessions           integer          NOT NULL,
    cpu_percent             double precision NOT NULL,
    mem_used_bytes          bigint           NOT NULL,
    chrome_pss_bytes        bigint           NOT NULL,
    jobs_since_chrome_start bigint           NOT NULL,
    chrome_restarts         bigint           NOT NULL,
    PRIMARY KEY (at, node_id)
);
