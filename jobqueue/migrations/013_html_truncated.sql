-- Whether a result's HTML was cut at the job's cap (2 MiB by default): a
-- cut page's HTML was indistinguishable from a page of exactly that size.
ALTER TABLE results ADD COLUMN html_truncated boolean NOT NULL DEFAULT false;
