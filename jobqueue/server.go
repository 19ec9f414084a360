package jobqueue

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/browserfarm/browserfarm/internal/pgtune"
)

// Advice is one server setting that slows the queue down, and what to set.
type Advice struct {
	Setting string // the server setting's name
	Have    string // its current value
	Want    string // the recommended value (pgtune.Settings)
	Why     string
}

const serverSettingsSQL = `SELECT name, setting FROM pg_settings WHERE name IN ('autovacuum', 'autovacuum_naptime')`

// ServerAdvice reads the server's settings and returns those that slow the
// queue down: none when they are as recommended (pgtune.Settings).
func (q *Queue) ServerAdvice(ctx context.Context) ([]Advice, error) {
	rows, err := q.pool.Query(ctx, serverSettingsSQL)
	if err != nil {
		return nil, fmt.Errorf("reading server settings: %w", err)
	}
	settings := map[string]string{}
	var name, value string
	if _, err := pgx.ForEachRow(rows, []any{&name, &value}, func() error {
		settings[name] = value
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading server settings: %w", err)
	}
	return advise(settings), nil
}

// advise judges settings as pg_settings gives them (autovacuum_naptime in
// seconds).
func advise(settings map[string]string) []Advice {
	var out []Advice
	if v := settings["autovacuum"]; v != "" && v != "on" {
		out = append(out, Advice{Setting: "autovacuum", Have: v, Want: "on",
			Why: "every job leaves dead index entries that only a vacuum removes; without autovacuum the queue's statements slow down as they pile up"})
	}
	if v, ok := settings["autovacuum_naptime"]; ok {
		s, err := strconv.Atoi(v)
		if err != nil || time.Duration(s)*time.Second > pgtune.MaxNaptime {
			out = append(out, Advice{Setting: "autovacuum_naptime", Have: v + "s", Want: pgtune.Settings()["autovacuum_naptime"],
				Why: "autovacuum visits the jobs table once per naptime at most; the dead index entries of the jobs finished in between slow the assignment round, Claim and the capacity check"})
		}
	}
	return out
}
