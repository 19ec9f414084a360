package browser

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// deadPID returns the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestSweepStaleProfiles(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, owner int) string {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Join(dir, "Default"), 0o700); err != nil {
			t.Fatal(err)
		}
		if owner != 0 {
			if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(owner)+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	dead := mk("bfc-dead", deadPID(t))
	live := mk("bfc-live", os.Getpid())
	unmarked := mk("bfc-unmarked", 0)
	other := mk("not-ours", deadPID(t))
	removed, err := SweepStaleProfiles(root)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{dead}) {
		t.Fatalf("removed %v, want only %s", removed, dead)
	}
	for _, d := range []string{live, unmarked, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("%s is still there", dead)
	}
}

// TestRemovalLeavesTheOwnerMarkLast: a removal cut short (here an entry
// that will not go; on a node, the process killed in the middle) leaves the
// owner mark with what is left, and the sweep removes the rest once the
// owner is gone. Removed first, the mark left an unmarked directory that no
// sweep touches (QA: a profile left for good after a kill -9).
func TestRemovalLeavesTheOwnerMarkLast(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bfc-cut")
	for _, d := range []string{"Default", "a", "z"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(deadPID(t))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stuck := errors.New("will not go")
	err := removeOwned(dir, func(p string) error {
		if filepath.Base(p) == "z" {
			return stuck
		}
		return os.RemoveAll(p)
	})
	if !errors.Is(err, stuck) {
		t.Fatalf("removeOwned = %v, want %v", err, stuck)
	}
	if _, err := os.Stat(filepath.Join(dir, ownerFile)); err != nil {
		t.Fatalf("the owner mark is gone with the removal cut short: %v", err)
	}
	removed, err := SweepStaleProfiles(filepath.Dir(dir))
	if err != nil || !slices.Equal(removed, []string{dir}) {
		t.Fatalf("sweep removed %v (%v), want %s", removed, err, dir)
	}
}
