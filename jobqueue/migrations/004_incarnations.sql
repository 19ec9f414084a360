-- One live process per node id.
--
-- Every registration of a node id takes a new incarnation from the
-- sequence; the node's heartbeats, claims, completions, failures, drains,
-- releases and exit marks carry it, and are refused once a newer
-- incarnation registered. pid is the registering process's id on its host,
-- so that a restarted process on the same host can prove its predecessor
-- gone (see Register). exit_reason is what the last incarnation said when it
-- marked itself exited.
CREATE SEQUENCE node_incarnations;

ALTER TABLE nodes
    ADD COLUMN incarnation bigint  NOT NULL DEFAULT 0,
    ADD COLUMN pid         integer NOT NULL DEFAULT 0,
    ADD COLUMN exit_reason text    NOT NULL DEFAULT '';
