// Package pgtune holds the PostgreSQL server settings the farm's queue is
// built and measured with: internal/pglocal starts every private server
// with them (farm up, the tests, the benchmarks, River's baseline), and a
// producer warns when its server differs (jobqueue.Queue.ServerAdvice).
// A leaf: it imports nothing of the project, so that any of those can.
package pgtune

import (
	"strconv"
	"time"
)

// MaxNaptime is the longest autovacuum_naptime the queue keeps its speed
// with. Every job leaves dead entries in the pending and in-flight partial
// indexes, which the assignment round, Claim and the capacity check read
// from their front; only a vacuum of jobs removes them, and autovacuum looks
// at a table once per naptime at most. Over 200,000-job lifecycles
// (scripts/bench.sh scale -lifecycle-jobs 200000 -lifecycle-rounds 1, two
// runs each way) PostgreSQL's default minute let those statements grow 3-5×
// slower as a run went on: 2,616 and 1,614 jobs/s on an empty table, 4,074
// and 4,035 with 10M jobs retained, against 3,060 and 2,987, 5,747 and 5,369
// with 10 s. A short burst on a large table pays for it instead (20,000-job
// rounds at 10M, one run each way: about 5,200 against 7,300 jobs/s), most
// likely autovacuum's visits then falling inside the burst; sustained load
// is what a farm runs.
const MaxNaptime = 10 * time.Second

// Settings returns the recommended server settings as name → value, in the
// form postgresql.conf, `postgres -c` and a managed database's parameter
// group take. The map is the caller's to change.
func Settings() map[string]string {
	return map[string]string{
		"autovacuum_naptime": strconv.Itoa(int(MaxNaptime/time.Second)) + "s",
	}
}
