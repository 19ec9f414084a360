-- Lifetime counters, per node id across its process restarts and farm-wide.
-- They are maintained in the transactions that change what they count
-- (completion, failure, heartbeat, registration), never computed by scanning
-- jobs, so they cost the same whatever the history and survive retention.
--
-- node_counters has a row per node id. When a gone node is deleted its row
-- is added into farm_counters (a single row) and deleted, so that the
-- farm-wide total — farm_counters plus the sum of node_counters — never
-- goes down, and costs a read per node.
CREATE TABLE node_counters (
    node_id                text   PRIMARY KEY,
    jobs_completed         bigint NOT NULL DEFAULT 0,
    -- Jobs that reached failed (attempts exhausted or a permanent error).
    jobs_failed            bigint NOT NULL DEFAULT 0,
    chrome_recycles        bigint NOT NULL DEFAULT 0,  -- planned, every N jobs
    chrome_memory_recycles bigint NOT NULL DEFAULT 0,  -- early, at the memory ceiling
    chrome_crashes         bigint NOT NULL DEFAULT 0,  -- Chromes lost unplanned (exit, hang)
    -- Process restarts by how the previous process ended.
    restarts_recycle       bigint NOT NULL DEFAULT 0,  -- exit 75 after exit-after-jobs
    restarts_stop          bigint NOT NULL DEFAULT 0,  -- stopped on request (SIGTERM)
    restarts_crash         bigint NOT NULL DEFAULT 0   -- killed, crashed, lost, or gave up
) WITH (fillfactor = 50);

CREATE TABLE farm_counters (
    id                     boolean PRIMARY KEY DEFAULT true CHECK (id),
    jobs_completed         bigint NOT NULL DEFAULT 0,
    jobs_failed            bigint NOT NULL DEFAULT 0,
    chrome_recycles        bigint NOT NULL DEFAULT 0,
    chrome_memory_recycles bigint NOT NULL DEFAULT 0,
    chrome_crashes         bigint NOT NULL DEFAULT 0,
    restarts_recycle       bigint NOT NULL DEFAULT 0,
    restarts_stop          bigint NOT NULL DEFAULT 0,
    restarts_crash         bigint NOT NULL DEFAULT 0
);
INSERT INTO farm_counters DEFAULT VALUES;

-- What the node's current process reported so far, so that a heartbeat adds
-- only what is new to node_counters.
ALTER TABLE nodes
    ADD COLUMN chrome_recycles        bigint NOT NULL DEFAULT 0,
    ADD COLUMN chrome_memory_recycles bigint NOT NULL DEFAULT 0,
    ADD COLUMN chrome_crashes         bigint NOT NULL DEFAULT 0;

INSERT INTO node_counters (node_id) SELECT id FROM nodes;
