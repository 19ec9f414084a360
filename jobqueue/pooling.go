package jobqueue

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ForTransactionPooling makes every statement of pools built from cfg
// self-contained, for PgBouncer's transaction pooling (poll-only
// processes): pgx's default caches a named prepared statement per
// connection, which a pooler that hands each transaction another server
// connection breaks. Cached descriptions use only the unnamed statement,
// parsed and run in the same round trip, and keep binary encoding (unlike
// the exec and simple-protocol modes). The queue itself needs no other
// session state from a consumer: no LISTEN (a poll-only process opens no
// Listener), no session-level advisory lock.
func ForTransactionPooling(cfg *pgxpool.Config) {
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
}
