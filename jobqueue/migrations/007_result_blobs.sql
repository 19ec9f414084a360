-- Results whose HTML and screenshot live in a blob store (S3 or a directory)
-- keep only where they are: [{"kind":"html"|"screenshot","key":…,"size":…,"sha256":…}].
ALTER TABLE results ADD COLUMN blobs jsonb;
