-- The range of each node's Chrome PSS, and the recycling thresholds each node
-- runs with.
--
-- A node that recycles Chrome every few seconds rises and falls several
-- times between two dashboard samples; one PSS value per sample shows a flat
-- or random line. Heartbeats widen nodes.chrome_pss_min_bytes/max_bytes with
-- the range the node saw since its previous heartbeat; the dashboard's
-- recorder copies the range into node_samples and clears it, so each sample
-- holds the range since the previous one. NULL: nothing reported since.
ALTER TABLE nodes
    ADD COLUMN chrome_pss_min_bytes bigint,
    ADD COLUMN chrome_pss_max_bytes bigint,
    -- What the node's supervisor runs with, reported at registration, so
    -- the dashboard and the producer read the node's own policy instead of
    -- assuming one. 0: the threshold is off.
    ADD COLUMN chrome_recycle_jobs integer NOT NULL DEFAULT 0,
    ADD COLUMN exit_after_jobs integer NOT NULL DEFAULT 0;

ALTER TABLE node_samples
    ADD COLUMN chrome_pss_min_bytes bigint,
    ADD COLUMN chrome_pss_max_bytes bigint;
