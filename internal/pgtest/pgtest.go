// Package pgtest gives tests a real PostgreSQL: one private cluster per test
// binary (started with internal/pglocal, or the server named by
// FARM_TEST_DATABASE_URL), and a fresh database per test so tests run in
// parallel without seeing each other's rows or NOTIFY traffic (notifications
// are scoped to a database). Being test-only code (no product package
// imports it), it reads its configuration from the environment itself:
// FARM_TEST_DATABASE_URL and FARM_PG_BIN (the directory of initdb, as farm up
// --pg-bin).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/internal/pglocal"
)

// EnvURL names the environment variable that points tests at an existing
// server instead of a private cluster. Its role must be allowed to create databases.
const EnvURL = "FARM_TEST_DATABASE_URL"

// adminConnString is set once by Main before any test runs and only read after.
var adminConnString string

// Main runs the test binary's tests against a PostgreSQL server: the one in
// FARM_TEST_DATABASE_URL, or a private cluster started for this binary and
// stopped (and deleted) when the tests end. Call it from TestMain.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if u := os.Getenv(EnvURL); u != "" {
		adminConnString = u
		return m.Run()
	}
	ctx := context.Background()
	cluster, stop, err := pglocal.StartTemp(ctx, "farm-pgtest-", pglocal.Config{
		// The tests' stand-in for farm up --pg-bin: pglocal reads no
		// environment, its callers do.
		BinDir:    os.Getenv("FARM_PG_BIN"),
		Ephemeral: true,
		Settings:  map[string]string{"max_connections": "300"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest: starting a private PostgreSQL:", err)
		return 1
	}
	defer func() {
		if err := stop(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}()
	adminConnString = cluster.ConnString("postgres")
	return m.Run()
}

// NewDB creates an empty database for this test alone, drops it when the test
// ends, and returns a connection string for it.
func NewDB(t testing.TB) string {
	t.Helper()
	if adminConnString == "" {
		t.Fatal("pgtest: no server; call pgtest.Main(m) from TestMain")
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, adminConnString)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, adminConnString)
		if err != nil {
			t.Errorf("pgtest: connect to drop %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return withDatabase(adminConnString, name)
}

// NewPool is NewDB plus a pool on it, closed when the test ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(NewDB(t))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// withDatabase points a URL or keyword/value connection string at another database.
func withDatabase(conn, dbname string) string {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		u, err := url.Parse(conn)
		if err == nil {
			u.Path = "/" + dbname
			return u.String()
		}
	}
	// In keyword/value form a later keyword overrides an earlier one.
	return conn + " dbname=" + dbname
}
