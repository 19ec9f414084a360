package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

// logOptions are the logging flags every long-running command has.
type logOptions struct {
	level  string
	format string
}

func (o *logOptions) register(fs *flagSet) {
	fs.StringVar(&o.level, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.format, "log-format", "auto", "log format: auto (console on a terminal, JSON otherwise), json, console")
}

// newLogger builds the process logger: JSON for machines (systemd, Docker,
// log shippers), a colourless console format for people at a terminal.
func (o *logOptions) newLogger(w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(o.level)
	if err != nil {
		return nil, usagef("--log-level: %v", err)
	}
	format := o.format
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			format = "console"
		}
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch format {
	case "json":
		enc = zapcore.NewJSONEncoder(encCfg)
	case "console":
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	default:
		return nil, usagef("--log-format: %q is not one of auto, json, console", o.format)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)), nil
}

// dbOptions is the database flag of every command that talks to PostgreSQL.
type dbOptions struct {
	url string
	// The operator's commands (registerLocal) fall back to the `farm up`
	// running on dataDir when no URL is given.
	findLocal bool
	dataDir   string
	getenv    func(string) string
	// pollOnly (--poll-only) keeps no session state on pooled
	// connections, for PgBouncer's transaction pooling (see openPool).
	pollOnly bool
}

// registerPollOnly adds --poll-only to a command whose process stays
// connected (producer, consumer).
func (o *dbOptions) registerPollOnly(fs *flagSet, what string) {
	fs.BoolVar(&o.pollOnly, "poll-only", false, "no LISTEN/NOTIFY and no named prepared statements: "+what)
}

// registerLocal adds --data-dir: with no --database-url the command uses the
// `farm up` that runs there (see localfarm.go).
func (o *dbOptions) registerLocal(fs *flagSet, getenv func(string) string) {
	o.findLocal, o.getenv = true, getenv
	fs.StringVar(&o.dataDir, "data-dir", "", "without --database-url: use the `farm up` running with this data dir (default: farm up's default)")
}

func (o *dbOptions) register(fs *flagSet) {
	fs.StringVar(&o.url, "database-url", "", "PostgreSQL URL or keyword/value string (producer, consumer, migrate: required; `farm up` starts its own when empty; submit, status, results, cancel, retry: default the running `farm up`)")
}

// pool connects to the database, failing fast with a message that names the problem.
func (o *dbOptions) pool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	if o.url == "" && o.findLocal {
		dir := o.dataDir
		if dir == "" {
			dir = defaultDataDir(o.getenv)
		}
		url, err := localDatabaseURL(dir)
		if err != nil {
			return nil, err
		}
		return openPool(ctx, url, maxConns, o.pollOnly)
	}
	if o.url == "" {
		return nil, usagef("--database-url (or FARM_DATABASE_URL) is required")
	}
	return openPool(ctx, o.url, maxConns, o.pollOnly)
}

// openPool connects a pool of at most maxConns. stateless makes every
// statement self-contained for PgBouncer's transaction pooling (see
// jobqueue.ForTransactionPooling).
func openPool(ctx context.Context, url string, maxConns int32, stateless bool) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usagef("--database-url: %v", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if stateless {
		jobqueue.ForTransactionPooling(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database %s: %w", cfg.ConnConfig.Host, err)
	}
	return pool, nil
}
