package pglocal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// tempStopTimeout bounds the stop of a throwaway cluster.
const tempStopTimeout = time.Minute

// StartTemp starts a throwaway cluster (tests, benchmarks) with its data in
// a new directory under os.TempDir named after pattern; cfg.DataDir is set
// there. The returned stop shuts the server down (within a minute, whatever
// ctx it gets) and removes the directory; call it once the cluster is no
// longer needed, also when the caller's own context has ended.
func StartTemp(ctx context.Context, pattern string, cfg Config) (*Cluster, func(context.Context) error, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return nil, nil, fmt.Errorf("pglocal: %w", err)
	}
	// The server may run as another account (when the caller runs as
	// root); it must be able to enter the directory that holds its data.
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("pglocal: %w", err)
	}
	cfg.DataDir = filepath.Join(dir, "pg")
	cluster, err := Start(ctx, cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	stop := func(ctx context.Context) error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tempStopTimeout)
		defer cancel()
		return errors.Join(cluster.Stop(sctx), os.RemoveAll(dir))
	}
	return cluster, stop, nil
}
