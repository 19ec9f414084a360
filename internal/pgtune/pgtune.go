// Package pgtune holds the PostgreSQL server settings the farm's queue is
// built and measured with: every private server the farm starts (farm up,
// the tests, the benchmarks, River's baseline) runs with them, and a
// producer warns when its server differs (jobqueue.Queue.ServerAdvice).
// It imports nothing, so that any of those can use it.
package pgtune

import (
	"strconv"
	"time"
)

// MaxNaptime is the longest autovacuum_naptime the queue keeps its speed
// with. Every job leaves dead entries in the pending and in-flight partial
// indexes, which the assignment round, Claim and the capacity check read
// from their front; only a vacuum of jobs removes them, and autovacuum looks
// at a table once per naptime at most. Over a 200,000-job lifecycle
// (scripts/bench.sh scale -lifecycle-jobs 200000) PostgreSQL's default
// minute let those statements grow 3-5× slower as the run went on: 2,616
// jobs/s on an empty table and 4,074 with 10M jobs retained, against 3,060
// and 5,747 with 10 s.
const MaxNaptime = 10 * time.Second

// Settings returns the recommended server settings as name → value, in the
// form postgresql.conf, `postgres -c` and a managed database's parameter
// group take. The map is the caller's to change.
func Settings() map[string]string {
	return map[string]string{
		"autovacuum_naptime": strconv.Itoa(int(MaxNaptime/time.Second)) + "s",
	}
}
