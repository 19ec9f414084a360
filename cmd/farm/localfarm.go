package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// localFarmFile is what `farm up` leaves in its data dir while it runs, so
// that submit, status, results, cancel and retry on the same machine reach
// it without a database URL.
const localFarmFile = "farm.json"

// localFarm is the content of localFarmFile.
type localFarm struct {
	DatabaseURL string    `json:"database_url"`
	Dashboard   string    `json:"dashboard"`
	PID         int       `json:"pid"`
	Version     string    `json:"version"`
	StartedAt   time.Time `json:"started_at"`
}

// writeLocalFarm records lf in dir atomically (a reader sees the old file or
// the whole new one, never half) and returns the function that removes it.
// Owner-only: a database URL given to `farm up` may hold a password.
func writeLocalFarm(dir string, lf localFarm) (remove func(), err error) {
	b, err := json.MarshalIndent(lf, "", "  ")
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, ".farm-*.json")
	if err != nil {
		return nil, fmt.Errorf("recording the farm in %s: %w", dir, err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	path := filepath.Join(dir, localFarmFile)
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("recording the farm in %s: %w", dir, werr)
	}
	return func() {
		// Only our own record: a later `farm up` on the same dir may have replaced it.
		if cur, err := readLocalFarm(dir); err == nil && cur.PID == lf.PID {
			os.Remove(path)
		}
	}, nil
}

func readLocalFarm(dir string) (localFarm, error) {
	var lf localFarm
	b, err := os.ReadFile(filepath.Join(dir, localFarmFile))
	if err != nil {
		return lf, err
	}
	if err := json.Unmarshal(b, &lf); err != nil {
		return lf, fmt.Errorf("%s: %w", filepath.Join(dir, localFarmFile), err)
	}
	return lf, nil
}

// localDatabaseURL is the database of the `farm up` running on dataDir, or
// an error that says what to do.
func localDatabaseURL(dataDir string) (string, error) {
	lf, err := readLocalFarm(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", usagef("no database given and no `farm up` running with data dir %s: "+
			"start one there with `farm up`, point --data-dir (FARM_DATA_DIR) at the one you run, "+
			"or pass --database-url (FARM_DATABASE_URL)", dataDir)
	}
	if err != nil {
		return "", fmt.Errorf("finding the local farm: %w", err)
	}
	if !processAlive(lf.PID) {
		return "", usagef("the `farm up` recorded in %s (pid %d) is not running any more: start it again with `farm up`, "+
			"or pass --database-url (FARM_DATABASE_URL)", filepath.Join(dataDir, localFarmFile), lf.PID)
	}
	if lf.DatabaseURL == "" {
		return "", fmt.Errorf("%s names no database", filepath.Join(dataDir, localFarmFile))
	}
	return lf.DatabaseURL, nil
}

func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
