package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// pgBouncer is a PgBouncer in transaction pooling mode in front of the
// private cluster, for the nodes of a -pgbouncer run: it proves that
// poll-only nodes keep no session state (a LISTEN, a named prepared
// statement or a session lock would fail or misbehave there) and shows how
// few server connections a fleet then needs.
type pgBouncer struct {
	cmd  *exec.Cmd
	port int
	done chan error
}

// startPgBouncer runs the pgbouncer binary on 127.0.0.1 with poolSize
// server connections, in front of the cluster's unix socket. PgBouncer,
// like PostgreSQL, refuses to run as root: it runs as the "postgres"
// account then.
func startPgBouncer(ctx context.Context, dir, socketDir string, pgPort, maxClients, poolSize int) (*pgBouncer, error) {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer"
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("-pgbouncer: no pgbouncer binary (apt-get install pgbouncer)")
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	auth := filepath.Join(dir, "userlist.txt")
	ini := filepath.Join(dir, "pgbouncer.ini")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(auth, []byte(`"postgres" ""`+"\n"), 0o644); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`[databases]
* = host=%s port=%d
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = %d
max_client_conn = %d
logfile = %s
`, socketDir, pgPort, port, auth, poolSize, maxClients, filepath.Join(dir, "pgbouncer.log"))
	if err := os.WriteFile(ini, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, ini)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("-pgbouncer as root needs a postgres account: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	b := &pgBouncer{cmd: cmd, port: port, done: make(chan error, 1)}
	go func() { b.done <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return b, nil
		}
		select {
		case err := <-b.done:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			return nil, fmt.Errorf("pgbouncer exited: %v: %s", err, log)
		case <-ctx.Done():
			b.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.stop()
			return nil, fmt.Errorf("pgbouncer did not listen on %d within 10 s", port)
		}
	}
}

// dsn is the nodes' connection string through the bouncer.
func (b *pgBouncer) dsn() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", b.port)
}

func (b *pgBouncer) stop() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
}
