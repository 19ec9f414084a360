-- The job queue: consumer nodes, jobs and their results.
--
-- jobs is the hot table: every job is inserted once and updated three times
-- (assign, claim, finish). On PostgreSQL 15 a change of state cannot be a HOT
-- update (state is in the partial index predicates), so every update adds an
-- entry to the primary key, the batch index, and each partial index whose
-- predicate the new row version matches: one state index (they cover
-- disjoint states), plus the dedup index for jobs of a crawl. That is why the
-- indexes are few and mostly partial. Lease renewals touch no indexed column and stay HOT, which the
-- fillfactor leaves room for.

CREATE TABLE nodes (
    id                       text             PRIMARY KEY,
    hostname                 text             NOT NULL DEFAULT '',
    version                  text             NOT NULL DEFAULT '',
    capacity                 integer          NOT NULL CHECK (capacity BETWEEN 1 AND 1000),
    state                    text             NOT NULL DEFAULT 'active'
                                              CHECK (state IN ('active', 'draining', 'exited', 'lost')),
    -- Times this id registered again after its first registration (process restarts).
    process_restarts         bigint           NOT NULL DEFAULT 0,
    cpu_percent              double precision NOT NULL DEFAULT 0,
    mem_used_bytes           bigint           NOT NULL DEFAULT 0,
    mem_total_bytes          bigint           NOT NULL DEFAULT 0,
    chrome_pss_bytes         bigint           NOT NULL DEFAULT 0,
    busy_sessions            integer          NOT NULL DEFAULT 0,
    jobs_since_chrome_start  bigint           NOT NULL DEFAULT 0,
    jobs_since_process_start bigint           NOT NULL DEFAULT 0,
    chrome_restarts          bigint           NOT NULL DEFAULT 0,
    registered_at            timestamptz      NOT NULL DEFAULT now(),
    started_at               timestamptz      NOT NULL DEFAULT now(),
    heartbeat_at             timestamptz      NOT NULL DEFAULT now(),
    state_changed_at         timestamptz      NOT NULL DEFAULT now()
) WITH (fillfactor = 50);

CREATE TABLE jobs (
    id               bigserial   PRIMARY KEY,
    -- One per Enqueue call; followed children inherit their parent's.
    batch_id         uuid        NOT NULL,
    state            text        NOT NULL DEFAULT 'pending'
                                 CHECK (state IN ('pending', 'queued', 'processing', 'completed', 'failed', 'canceled')),
    priority         integer     NOT NULL DEFAULT 0,
    spec             jsonb       NOT NULL,
    -- Lower-cased host[:port] of spec.url, for farm-wide per-host politeness.
    host             text        NOT NULL,
    -- The node holding (queued, processing) or that last held the job. No
    -- foreign key: the check would share-lock the node row on every assignment.
    node_id          text,
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 3 CHECK (max_attempts BETWEEN 1 AND 20),
    run_after        timestamptz NOT NULL DEFAULT now(),
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    queued_at        timestamptz,
    started_at       timestamptz,
    finished_at      timestamptz,
    last_error       text,
    error_class      text,
    parent_id        bigint,
    -- The root job of a followed crawl (a root's crawl_id is its own id).
    crawl_id         bigint      NOT NULL,
    depth            integer     NOT NULL DEFAULT 0,
    -- Normalized URL for jobs that take part in a crawl (spec.follow); NULL otherwise.
    dedup_key        text,
    CHECK ((state IN ('queued', 'processing')) = (node_id IS NOT NULL) OR state IN ('completed', 'failed', 'canceled'))
) WITH (
    fillfactor = 70,
    -- A queue table churns: vacuum it after 2% of its rows died rather than
    -- PostgreSQL's default 20%, and without cost-based sleeping, so the
    -- partial indexes the hot queries scan stay small.
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- Assignment: the next pending jobs by priority, then age.
CREATE INDEX jobs_pending_idx ON jobs (priority DESC, id) WHERE state = 'pending';

-- What each node holds: capacity checks, Claim, Release, rescue, Stats. The
-- in-flight set is small (at most the farm's total capacity), so the host
-- column rides along for the producer's per-host politeness counts
-- (index-only) instead of costing an index of its own.
CREATE INDEX jobs_node_active_idx ON jobs (node_id, state) INCLUDE (host)
    WHERE state IN ('queued', 'processing');

-- Finished jobs by time: retention, recent throughput, counts by final state.
CREATE INDEX jobs_finished_idx ON jobs (finished_at) INCLUDE (state)
    WHERE state IN ('completed', 'failed', 'canceled');

-- Listing a batch.
CREATE INDEX jobs_batch_idx ON jobs (batch_id, id);

-- A URL is crawled once per crawl.
CREATE UNIQUE INDEX jobs_dedup_idx ON jobs (crawl_id, dedup_key) WHERE dedup_key IS NOT NULL;

CREATE TABLE results (
    job_id         bigint      PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    node_id        text        NOT NULL,
    final_url      text        NOT NULL DEFAULT '',
    status         integer     NOT NULL DEFAULT 0,
    title          text        NOT NULL DEFAULT '',
    data           jsonb,
    html           text,
    screenshot     bytea,
    console_errors jsonb       NOT NULL DEFAULT '[]',
    timings        jsonb       NOT NULL DEFAULT '{}',
    links          jsonb       NOT NULL DEFAULT '[]',
    created_at     timestamptz NOT NULL DEFAULT now()
);
