-- Compaction folds only the minutes that got new delta rows.
--
-- It deleted and re-inserted every row of finished_minutes at every sample
-- (5 s): one row per minute, state and failure class of the whole retained
-- history (30,000 rows for a busy week, 8 MB of WAL a tick), and without
-- retention ever more. A folded row is marked, the delta rows the
-- statements and triggers append are not, and a partial index finds the
-- minutes that have any.
ALTER TABLE finished_minutes ADD COLUMN folded boolean NOT NULL DEFAULT false;
CREATE INDEX finished_minutes_unfolded_idx ON finished_minutes (minute) WHERE NOT folded;
