package browser

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ownerFile, inside a profile (or separate temp) directory, holds the pid
// of the process that made it, so that a later process can tell a dead
// process's leftovers from a live one's directory in a shared root.
const ownerFile = ".bfc-owner"

// dirPrefix starts the name of every directory a Launch makes.
const dirPrefix = "bfc-"

// markOwner records this process as the owner of dir.
func markOwner(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return fmt.Errorf("browser: marking the owner of %s: %w", dir, err)
	}
	return nil
}

// SweepStaleProfiles removes the profile and temp directories under root
// (os.TempDir() when empty) and under os.TempDir() that a process which no
// longer runs left behind — a consumer killed with -9 has no chance to
// remove its Chromes' directories. A directory whose owner still runs, or
// that has no owner mark (being created, or made by another program), is
// left alone. It returns the directories removed; an error is for a
// directory that could not be read or removed, after trying the others.
func SweepStaleProfiles(root string) ([]string, error) {
	roots := []string{os.TempDir()}
	if root != "" && filepath.Clean(root) != filepath.Clean(os.TempDir()) {
		roots = append(roots, root)
	}
	var removed []string
	var errs []error
	for _, r := range roots {
		entries, err := os.ReadDir(r)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("browser: sweeping %s: %w", r, err))
			}
			continue
		}
		for _, e := range entries {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), dirPrefix) {
				continue
			}
			dir := filepath.Join(r, e.Name())
			b, err := os.ReadFile(filepath.Join(dir, ownerFile))
			if err != nil {
				continue
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || pid <= 0 || ProcessRuns(pid) {
				continue
			}
			if err := removeAllRetry(dir); err != nil {
				errs = append(errs, fmt.Errorf("browser: removing stale %s: %w", dir, err))
				continue
			}
			removed = append(removed, dir)
		}
	}
	return removed, errors.Join(errs...)
}

// ProcessRuns reports whether a process with this pid exists; one that
// exists but is another user's counts as running.
func ProcessRuns(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
