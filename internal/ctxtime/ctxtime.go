// Package ctxtime holds the one pause that a context can cut short, for the
// retry loops of the consumer, its wake-up client and the command's startup.
package ctxtime

import (
	"context"
	"time"
)

// Sleep pauses for d unless ctx ends first, and reports whether it slept
// the whole d.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
