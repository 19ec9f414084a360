package pglocal

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestStartReuseStop(t *testing.T) {
	ctx := context.Background()
	base := reachableTempDir(t)
	dir := filepath.Join(base, "data")

	c, err := Start(ctx, Config{DataDir: dir, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	var listen string
	if err := conn.QueryRow(ctx, "SHOW listen_addresses").Scan(&listen); err != nil {
		t.Fatal(err)
	}
	if listen != "" {
		t.Errorf("listen_addresses = %q, want empty (unix socket only)", listen)
	}
	conn.Close(ctx)
	if os.Geteuid() == 0 {
		var st syscall.Stat_t
		if err := syscall.Stat(dir, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid == 0 {
			t.Errorf("data dir owned by root; the server must run unprivileged")
		}
	}

	// A second server on the same data dir must be refused, not corrupt it.
	if _, err := Start(ctx, Config{DataDir: dir}); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second Start on a live data dir: err = %v, want 'already running'", err)
	}

	pid := c.PID()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("postmaster %d still exists after Stop (kill 0: %v)", pid, err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}

	// Reuse: same data dir, data still there, no initdb.
	c2, err := Start(ctx, Config{DataDir: dir, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Stop(ctx)
	conn, err = pgx.Connect(ctx, c2.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v int
	if err := conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 42 {
		t.Fatalf("reused cluster lost data: v=%d err=%v", v, err)
	}
}

func TestNoTCPListener(t *testing.T) {
	ctx := context.Background()
	base := reachableTempDir(t)
	c, err := Start(ctx, Config{DataDir: filepath.Join(base, "d"), Port: 54329, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	d := net.Dialer{Timeout: time.Second}
	if conn, err := d.DialContext(ctx, "tcp", "127.0.0.1:54329"); err == nil {
		conn.Close()
		t.Fatal("something listens on TCP 127.0.0.1:54329; the cluster must be unix-socket only")
	}
	if _, err := os.Stat(filepath.Join(c.SocketDir(), ".s.PGSQL.54329")); err != nil {
		t.Fatalf("socket file: %v", err)
	}
}

func TestLongDataDirUsesShortSocketDir(t *testing.T) {
	ctx := context.Background()
	base := reachableTempDir(t)
	deep := filepath.Join(base, strings.Repeat("deep-directory-name/", 6), "data")
	if err := os.MkdirAll(filepath.Dir(deep), 0o755); err != nil {
		t.Fatal(err)
	}
	// MkdirAll honours umask; make the chain enterable for the server account.
	for p := filepath.Dir(deep); p != base; p = filepath.Dir(p) {
		os.Chmod(p, 0o755)
	}
	c, err := Start(ctx, Config{DataDir: deep, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	sock := c.SocketDir()
	if sock == deep {
		t.Fatalf("socket dir is the %d-byte data dir; it would overflow sun_path", len(deep))
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary socket dir %s left behind (stat: %v)", sock, err)
	}
}

func TestErrors(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		cfg  func(t *testing.T) Config
		want string
	}{
		{"no data dir", func(t *testing.T) Config { return Config{} }, "DataDir is required"},
		{"no binaries", func(t *testing.T) Config {
			return Config{DataDir: t.TempDir(), BinDir: t.TempDir()}
		}, "initdb"},
		{"non-empty foreign dir", func(t *testing.T) Config {
			d := reachableTempDir(t)
			os.WriteFile(filepath.Join(d, "precious.txt"), []byte("x"), 0o644)
			return Config{DataDir: d}
		}, "not empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Start(ctx, tt.cfg(t))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestFindBinDirMissingSaysHowToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	dir, err := FindBinDir()
	if err == nil {
		// Debian keeps the binaries off PATH, under /usr/lib/postgresql; that is found.
		if !strings.HasPrefix(dir, "/usr/lib/postgresql/") {
			t.Fatalf("found %s with an empty PATH", dir)
		}
		return
	}
	if !strings.Contains(err.Error(), "apt-get install postgresql") {
		t.Fatalf("error does not say how to install: %v", err)
	}
}

func TestRootNeedsUnreachableCheck(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root runs the server as another account")
	}
	private, err := os.MkdirTemp("", "pglocal-private-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(private) })
	os.Chmod(private, 0o700)
	_, err = Start(context.Background(), Config{DataDir: filepath.Join(private, "data")})
	if err == nil || !strings.Contains(err.Error(), "cannot enter") {
		t.Fatalf("err = %v, want a message that the server account cannot enter the parent", err)
	}
}

// reachableTempDir is a temp dir the unprivileged server account can enter
// (MkdirTemp makes it 0700, which only the caller can).
func reachableTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "pglocal-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// An initdb interrupted on an earlier start leaves only its staging dir,
// which the next start clears; the data dir itself is never half-made.
func TestInterruptedInitdbIsRedone(t *testing.T) {
	ctx := context.Background()
	base := reachableTempDir(t)
	dir := filepath.Join(base, "data")
	if err := os.MkdirAll(dir+".initdb/base", 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir+".initdb", "PG_VERSION"), []byte("15\n"), 0o600)
	c, err := Start(ctx, Config{DataDir: dir, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	if _, err := os.Stat(dir + ".initdb"); !os.IsNotExist(err) {
		t.Errorf("staging dir left behind: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "postgresql.conf")); err != nil {
		t.Errorf("no cluster in the data dir: %v", err)
	}
}

// TestConfigZeroRule: a negative Port or StartTimeout is an error naming
// the field, before anything starts.
func TestConfigZeroRule(t *testing.T) {
	for name, c := range map[string]Config{
		"Port":         {DataDir: t.TempDir(), Port: -2},
		"StartTimeout": {DataDir: t.TempDir(), StartTimeout: -time.Second},
	} {
		if _, err := Start(context.Background(), c); err == nil || !strings.Contains(err.Error(), name+" must not be negative") {
			t.Errorf("%s negative: err = %v", name, err)
		}
	}
}

// TestStartTemp: a throwaway cluster answers, and its stop shuts it down and
// removes its directory, also when the caller's context has ended.
func TestStartTemp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c, stop, err := StartTemp(ctx, "pglocal-temp-test-", Config{Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		stop(context.Background())
		t.Fatal(err)
	}
	conn.Close(ctx)
	dir := filepath.Dir(c.cfg.DataDir)
	cancel()
	if err := stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Exited():
	default:
		t.Error("the server still runs after stop")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cluster's directory %s is still there (%v)", dir, err)
	}
}

// CheckBinDir says whether a directory holds initdb and postgres, each an
// executable file, naming what is missing.
func TestCheckBinDir(t *testing.T) {
	dir := func(files map[string]os.FileMode) string {
		d := t.TempDir()
		for name, mode := range files {
			if mode.IsDir() {
				if err := os.Mkdir(filepath.Join(d, name), 0o755); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := os.WriteFile(filepath.Join(d, name), []byte("#!/bin/sh\n"), mode); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	for _, tc := range []struct {
		name string
		dir  string
		want string // "": accepted
	}{
		{"missing dir", "/nonexistent", "/nonexistent holds no executable initdb or postgres"},
		{"empty dir", dir(nil), "holds no executable initdb or postgres"},
		{"initdb only", dir(map[string]os.FileMode{"initdb": 0o755}), "holds no executable postgres"},
		{"not executable", dir(map[string]os.FileMode{"initdb": 0o644, "postgres": 0o755}), "holds no executable initdb"},
		{"a directory", dir(map[string]os.FileMode{"initdb": 0o755, "postgres": os.ModeDir}), "holds no executable postgres"},
		{"both", dir(map[string]os.FileMode{"initdb": 0o755, "postgres": 0o755}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckBinDir(tc.dir)
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("CheckBinDir = %v, want %q", err, tc.want)
			}
		})
	}
}
