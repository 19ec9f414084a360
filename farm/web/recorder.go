package web

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/internal/cfgrule"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// RecorderConfig configures a Recorder. Queue is required. Its numeric
// fields follow the one rule of every config struct: 0 means the default;
// none of them can be off; a negative one is a programming error that
// NewRecorder reports by panicking with the field's name, as it does for a
// nil Queue (the command checks its flags before).
type RecorderConfig struct {
	Queue *jobqueue.Queue
	// Interval is the time between samples. 0: the default, 5 s.
	Interval time.Duration
	// Retention is how long samples are kept. 0: the default, 1 h, what
	// the dashboard's charts show.
	Retention time.Duration
	// PruneBatch bounds the rows one prune statement deletes. 0: the
	// default, 5000.
	PruneBatch int
	// Logger receives failures. Default: zap.NewNop().
	Logger *zap.Logger
	// Now is the clock that sets the retention cutoff. Default: time.Now.
	Now func() time.Time
}

// Defaults of RecorderConfig.
const (
	DefaultSampleInterval  = 5 * time.Second
	DefaultSampleRetention = time.Hour
	DefaultPruneBatch      = 5000
)

// Recorder is the leader's actor that records the load samples behind the
// dashboard's charts (each node's Chrome PSS, CPU and busy sessions; the
// queue's counts and finishes per interval) and prunes those older than the
// retention. Several recorders at once are harmless (the queue skips a
// sample taken less than half an interval after the previous one), but one,
// on the leader, is what is meant.
type Recorder struct {
	cfg RecorderConfig
	log *zap.Logger
}

// NewRecorder returns a Recorder. It panics when cfg.Queue is nil, a wiring error.
func NewRecorder(cfg RecorderConfig) *Recorder {
	if cfg.Queue == nil {
		panic("web.NewRecorder: RecorderConfig.Queue is nil")
	}
	if err := errors.Join(
		cfgrule.Resolve("Interval", &cfg.Interval, DefaultSampleInterval, false),
		cfgrule.Resolve("Retention", &cfg.Retention, DefaultSampleRetention, false),
		cfgrule.Resolve("PruneBatch", &cfg.PruneBatch, DefaultPruneBatch, false),
	); err != nil {
		panic("web.NewRecorder: RecorderConfig." + err.Error())
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Recorder{cfg: cfg, log: cfg.Logger}
}

// Run samples at once and then every Interval until ctx ends, and returns
// nil then. A failed sample is logged (the first of a run of failures at
// warn level, the rest at debug, so a database outage does not flood the
// log) and retried at the next tick.
func (r *Recorder) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	failures := 0
	for {
		_, err := r.Tick(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			failures++
			lvl := r.log.Debug
			if failures == 1 {
				lvl = r.log.Warn
			}
			lvl("dashboard samples not recorded", zap.Error(err), zap.Int("consecutive_failures", failures))
		case failures > 0:
			r.log.Info("dashboard samples recorded again", zap.Int("failed_before", failures))
			failures = 0
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Tick records one sample, prunes samples past the retention and folds the
// queue's count deltas (so that reading a count stays a few rows).
func (r *Recorder) Tick(ctx context.Context) (jobqueue.SampleReport, error) {
	rep, err := r.cfg.Queue.RecordSamples(ctx, r.cfg.Interval)
	if err != nil {
		return rep, err
	}
	if _, err := r.cfg.Queue.CompactCounts(ctx); err != nil {
		return rep, err
	}
	_, err = r.cfg.Queue.PruneSamples(ctx, r.cfg.Now().Add(-r.cfg.Retention), r.cfg.PruneBatch)
	return rep, err
}
