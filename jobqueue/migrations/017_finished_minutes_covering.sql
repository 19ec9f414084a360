-- The window reads of finished_minutes read the index alone.
--
-- A window's counts (Stats' last minute, FinishedSince for /metrics and
-- the dashboard, FailureGroups' counts by class) read each of the window's
-- rows: through finished_minutes_idx, a heap fetch per row, and the rows
-- of one minute lie wherever the fold re-inserted them, beside a history's
-- on more pages than an empty table's. In the scale bench, /api/failures
-- at 1M retained read 294 buffers against 173 for the same 379 rows of its
-- hour (p50 0.53-0.60 against 0.42-0.49 ms); with this index, which
-- carries what the reads need, 0.43-0.49 against 0.43-0.44 ms. The fold and
-- the pruning of old minutes go by minute as before.
CREATE INDEX finished_minutes_window_idx ON finished_minutes (minute) INCLUDE (state, class, n);
DROP INDEX finished_minutes_idx;
