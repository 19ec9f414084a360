package ctxtime

import (
	"context"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	t.Parallel()
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep with a live context reported it was cut short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep with an ended context reported it slept an hour")
	}
}
