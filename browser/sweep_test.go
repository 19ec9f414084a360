package browser

import (
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
