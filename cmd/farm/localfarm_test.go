package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
)

func TestLocalFarmRecord(t *testing.T) {
	dir := t.TempDir()
	_, err := localDatabaseURL(dir)
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "farm up") || !strings.Contains(err.Error(), "--database-url") {
		t.Errorf("no record: err = %v, want a usage error that says to run farm up or pass --database-url", err)
	}

	remove, err := writeLocalFarm(dir, localFarm{DatabaseURL: "host=/x dbname=y", PID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if url, err := localDatabaseURL(dir); err != nil || url != "host=/x dbname=y" {
		t.Errorf("localDatabaseURL = %q, %v", url, err)
	}
	if st, err := os.Stat(filepath.Join(dir, localFarmFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("record: %v, %v; want mode 0600", st, err)
	}
	remove()
	if _, err := os.Stat(filepath.Join(dir, localFarmFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record still there after remove: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("files left in the data dir: %v", ents)
	}

	// A record whose process is gone (farm up was killed): say so.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := writeLocalFarm(dir, localFarm{DatabaseURL: "host=/x", PID: dead.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	if _, err := localDatabaseURL(dir); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("stale record: err = %v", err)
	}
}

// TestUpThenSubmitWithoutFlags: `farm up` in one process, `farm submit URL
// --wait` in another with no flags finds it through the data dir (both get
// the same FARM_DATA_DIR, as a shell profile would set it; the default dir
// for root is /var/lib/browserfarm, not a test's to use); after a clean stop
// the record is gone and submit says what to do.
func TestUpThenSubmitWithoutFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary, runs PostgreSQL and Chromium")
	}
	bin := buildFarm(t)
	_, dataDir := upDataDir(t)
	env := append(withoutFarmSettings(os.Environ()), "FARM_DATA_DIR="+dataDir)
	site := testutil.StartSite(t, testsite.Options{Items: 5})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	up := exec.CommandContext(ctx, bin, "up", "--consumers", "1", "--capacity", "2", "--listen", "127.0.0.1:0",
		"--allow-destination", strings.TrimPrefix(site.URL, "http://"))
	up.Env = env
	up.Cancel = func() error { return up.Process.Signal(os.Interrupt) }
	up.WaitDelay = 2 * time.Minute
	upErr := newLogBuffer()
	up.Stdout, up.Stderr = upErr, upErr
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	upDone := make(chan error, 1)
	go func() { upDone <- up.Wait() }()
	for {
		if _, err := os.Stat(filepath.Join(dataDir, localFarmFile)); err == nil {
			break
		}
		select {
		case err := <-upDone:
			t.Fatalf("farm up exited: %v\n%s", err, tail(upErr.String(), 3000))
		case <-ctx.Done():
			t.Fatal("farm up never recorded itself")
		case <-time.After(50 * time.Millisecond):
		}
	}

	submit := exec.CommandContext(ctx, bin, "submit", site.URL+"/page/3", "--wait")
	submit.Env = env
	out, err := submit.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "1 completed, 0 failed") {
		t.Fatalf("farm submit --wait: %v\n%s\nfarm up:\n%s", err, out, tail(upErr.String(), 3000))
	}
	t.Logf("farm submit: %s", strings.TrimSpace(string(out)))
	status := exec.CommandContext(ctx, bin, "status")
	status.Env = env
	if out, err := status.CombinedOutput(); err != nil || !strings.Contains(string(out), "COMPLETED") {
		t.Errorf("farm status: %v\n%s", err, out)
	}

	if err := up.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := <-upDone; err != nil {
		t.Fatalf("farm up after Ctrl-C: %v\n%s", err, tail(upErr.String(), 3000))
	}
	if _, err := os.Stat(filepath.Join(dataDir, localFarmFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the record outlived farm up: %v", err)
	}
	submit = exec.CommandContext(ctx, bin, "submit", site.URL+"/page/3")
	submit.Env = env
	out, err = submit.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), "start one there with `farm up`") {
		t.Errorf("submit with no farm: %v\n%s", err, out)
	}
}
