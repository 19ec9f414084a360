// Package pglocal starts and stops a private PostgreSQL cluster from the
// machine's own PostgreSQL binaries, so that tests and `farm up` need no
// database server set up by hand. The cluster listens only on a unix socket
// (no TCP port), lives in a data directory of the caller's choosing, is
// initialised on first use and reused afterwards, and — because PostgreSQL
// refuses to run as root — runs as an unprivileged user when the caller is root.
package pglocal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/internal/cfgrule"
	"github.com/browserfarm/browserfarm/internal/lockedstart"
	"github.com/browserfarm/browserfarm/internal/pgtune"
)

// Superuser is the database superuser created by initdb.
const Superuser = "postgres"

// socketPathMax is the longest unix socket path the kernel accepts (sun_path
// is 108 bytes including the terminating NUL).
const socketPathMax = 107

// Config says where and how to run the cluster. Only DataDir is required.
// Port and StartTimeout follow the one rule of every config struct: 0 means
// the default, neither can be off, and a negative one is an error naming
// the field.
type Config struct {
	// DataDir holds the cluster. It is created and initialised (initdb) when it
	// does not hold a cluster yet, and reused otherwise.
	DataDir string
	// BinDir holds initdb and postgres. Empty: discovered (see FindBinDir).
	BinDir string
	// RunAsUser is the account the server runs as when the caller is root.
	// Empty: "postgres" if that account exists, else "nobody". Ignored when
	// the caller is not root (the server then runs as the caller).
	RunAsUser string
	// Port only names the socket file (.s.PGSQL.<port>); nothing listens on TCP.
	// 0 means 5432.
	Port int
	// Ephemeral trades durability for speed (fsync, synchronous_commit and
	// full_page_writes off): right for tests, wrong for data you want to keep.
	Ephemeral bool
	// Settings are extra server settings passed as -c name=value, over
	// the farm's own (internal/pgtune), which every server starts with.
	Settings map[string]string
	// StartTimeout bounds initdb plus server start-up. 0 means 60 s.
	StartTimeout time.Duration
	// Logger receives start/stop events. Nil means no logging.
	Logger *zap.Logger
}

// Cluster is a running private PostgreSQL server. Stop it with Stop.
type Cluster struct {
	cfg       Config
	binDir    string
	socketDir string
	tmpSocket bool // socketDir was created by us outside DataDir
	port      int
	cmd       *exec.Cmd
	exited    chan struct{}
	waitErr   error
	logPath   string
	log       *zap.Logger
}

// ErrNoBinaries is returned when no PostgreSQL installation can be found.
var ErrNoBinaries = errors.New("pglocal: PostgreSQL server binaries (initdb, postgres) not found; " +
	"install them, e.g. `apt-get install postgresql` on Debian/Ubuntu or `dnf install postgresql-server` on Fedora, " +
	"or name the directory holding initdb (farm up --pg-bin, FARM_PG_BIN), or give a database URL instead")

// FindBinDir locates the directory holding initdb and postgres: PATH, then
// `pg_config --bindir`, then the newest /usr/lib/postgresql/*/bin (Debian's
// layout, which keeps them off PATH). A directory the operator names is
// Config.BinDir: this package reads no environment.
func FindBinDir() (string, error) {
	var candidates []string
	if p, err := exec.LookPath("initdb"); err == nil {
		candidates = append(candidates, filepath.Dir(p))
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	debian, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(debian, func(i, j int) bool { return pgMajor(debian[i]) > pgMajor(debian[j]) })
	candidates = append(candidates, debian...)
	for _, d := range candidates {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

// binaries are the programs of BinDir that Start runs.
var binaries = []string{"initdb", "postgres"}

// CheckBinDir reports whether dir holds the PostgreSQL binaries Start runs,
// each an executable file: a directory an operator names (farm up --pg-bin)
// can be checked before anything starts.
func CheckBinDir(dir string) error {
	var missing []string
	for _, name := range binaries {
		if !isExecutable(filepath.Join(dir, name)) {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s holds no executable %s (PostgreSQL's server binaries)", dir, strings.Join(missing, " or "))
	}
	return nil
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Start initialises the cluster if needed and starts the server, returning
// once it accepts connections. The server is a child of this process: Stop
// it before exiting (if this process dies, the kernel signals the server to
// shut down fast).
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("pglocal: Config.DataDir is required")
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("pglocal: data dir %q: %w", cfg.DataDir, err)
	}
	cfg.DataDir = dataDir
	if err := errors.Join(
		cfgrule.Resolve("Port", &cfg.Port, 5432, false),
		cfgrule.Resolve("StartTimeout", &cfg.StartTimeout, 60*time.Second, false),
	); err != nil {
		return nil, fmt.Errorf("pglocal: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	binDir := cfg.BinDir
	if binDir == "" {
		if binDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	} else if err := CheckBinDir(binDir); err != nil {
		return nil, fmt.Errorf("pglocal: %w: %w", err, ErrNoBinaries)
	}
	cred, err := runCredential(cfg.RunAsUser)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()

	if err := prepareDataDir(ctx, cfg, binDir, cred, log); err != nil {
		return nil, err
	}
	if pid, ok := runningPostmaster(dataDir); ok {
		return nil, fmt.Errorf("pglocal: a PostgreSQL server (pid %d) is already running on %s; stop it or use another data dir", pid, dataDir)
	}

	c := &Cluster{cfg: cfg, binDir: binDir, port: cfg.Port, exited: make(chan struct{}), log: log,
		logPath: filepath.Join(dataDir, "server.log")}
	c.socketDir = dataDir
	if len(filepath.Join(dataDir, ".s.PGSQL."+strconv.Itoa(cfg.Port))) > socketPathMax {
		// Deep data dirs (test temp dirs) overflow sun_path; a short private dir does not.
		if c.socketDir, err = os.MkdirTemp("", "farmpg"); err != nil {
			return nil, fmt.Errorf("pglocal: socket dir: %w", err)
		}
		c.tmpSocket = true
		if err := chownIfNeeded(c.socketDir, cred); err != nil {
			c.removeSocketDir()
			return nil, err
		}
	}
	if err := c.startServer(ctx, cred); err != nil {
		c.removeSocketDir()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) startServer(ctx context.Context, cred *syscall.Credential) error {
	logFile, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pglocal: open server log: %w", err)
	}
	defer logFile.Close() // the child keeps its own descriptor
	if err := chownIfNeeded(c.logPath, cred); err != nil {
		return err
	}
	args := []string{"-D", c.cfg.DataDir, "-p", strconv.Itoa(c.port),
		"-c", "listen_addresses=", "-c", "unix_socket_directories=" + c.socketDir}
	// The farm's server settings first (every server pglocal starts is the
	// farm's), then the caller's.
	settings := pgtune.Settings()
	if c.cfg.Ephemeral {
		settings["fsync"] = "off"
		settings["synchronous_commit"] = "off"
		settings["full_page_writes"] = "off"
	}
	for k, v := range c.cfg.Settings {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+settings[k])
	}
	cmd := exec.Command(filepath.Join(c.binDir, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = c.cfg.DataDir
	// Own process group: a Ctrl-C on the terminal reaches us, and we shut the
	// server down in order, rather than the server racing us. Pdeathsig makes
	// the kernel ask for a fast shutdown should this process die first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGINT, Credential: cred}
	// Pdeathsig follows the forking thread: lockedstart keeps it until the
	// server exits.
	if err := lockedstart.Start(cmd, func(err error) { // owned by the Cluster
		c.waitErr = err
		close(c.exited)
	}); err != nil {
		return fmt.Errorf("pglocal: start postgres: %w", err)
	}
	c.cmd = cmd
	c.log.Info("postgres starting", zap.Int("pid", cmd.Process.Pid), zap.String("data_dir", c.cfg.DataDir),
		zap.String("socket_dir", c.socketDir))

	for {
		if err := c.ping(ctx); err == nil {
			c.log.Info("postgres ready", zap.Int("pid", cmd.Process.Pid))
			return nil
		}
		select {
		case <-c.exited:
			return fmt.Errorf("pglocal: postgres exited during start-up (%v); server log %s:\n%s", c.waitErr, c.logPath, tail(c.logPath, 20))
		case <-ctx.Done():
			_ = c.Stop(context.Background())
			return fmt.Errorf("pglocal: postgres did not accept connections in time: %w; server log %s:\n%s", ctx.Err(), c.logPath, tail(c.logPath, 20))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) ping(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(pctx, c.ConnString("postgres"))
	if err != nil {
		return err
	}
	return conn.Close(pctx)
}

// ConnString is a libpq keyword/value connection string for database dbname
// over the cluster's unix socket.
func (c *Cluster) ConnString(dbname string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", c.socketDir, c.port, Superuser, dbname)
}

// PID is the postmaster's process id.
func (c *Cluster) PID() int { return c.cmd.Process.Pid }

// SocketDir is the directory holding the server's unix socket.
func (c *Cluster) SocketDir() string { return c.socketDir }

// Exited is closed when the server process has exited (for whatever reason).
func (c *Cluster) Exited() <-chan struct{} { return c.exited }

// Stop shuts the server down: a fast shutdown (open sessions are ended,
// the data is checkpointed), escalating to an immediate shutdown and then
// SIGKILL if ctx ends first. It is safe to call more than once.
func (c *Cluster) Stop(ctx context.Context) error {
	defer c.removeSocketDir()
	select {
	case <-c.exited:
		return nil
	default:
	}
	pid := c.cmd.Process.Pid
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.exited:
		c.log.Info("postgres stopped", zap.Int("pid", pid))
		return nil
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
	}
	c.log.Warn("postgres slow to stop; immediate shutdown", zap.Int("pid", pid))
	_ = c.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-c.exited:
		return nil
	case <-time.After(5 * time.Second):
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-c.exited
	return fmt.Errorf("pglocal: postgres (pid %d) had to be killed", pid)
}

func (c *Cluster) removeSocketDir() {
	if c.tmpSocket {
		_ = os.RemoveAll(c.socketDir)
	}
}

// prepareDataDir makes sure DataDir holds an initialised cluster owned by the
// account the server runs as. initdb works in a sibling directory that is
// renamed into place only when it succeeded, so an initdb killed half-way
// (Ctrl-C, a timeout) leaves nothing that a later start would trip over.
func prepareDataDir(ctx context.Context, cfg Config, binDir string, cred *syscall.Credential, log *zap.Logger) error {
	dir := cfg.DataDir
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err == nil {
		return nil
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("pglocal: data dir %s is not empty and holds no PostgreSQL cluster; refusing to initialise it", dir)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("pglocal: create data dir parent: %w", err)
	}
	staging := dir + ".initdb"
	if err := os.RemoveAll(staging); err != nil { // left by an interrupted attempt
		return fmt.Errorf("pglocal: clear %s: %w", staging, err)
	}
	if err := os.Mkdir(staging, 0o700); err != nil {
		return fmt.Errorf("pglocal: create data dir: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(staging)
		}
	}()
	if err := chownIfNeeded(staging, cred); err != nil {
		return err
	}
	if cred != nil {
		if err := checkReachable(staging, cred); err != nil {
			return err
		}
	}
	args := []string{"-D", staging, "-U", Superuser, "--auth=trust", "--encoding=UTF8", "--locale=C"}
	if cfg.Ephemeral {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Dir = staging
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pglocal: initdb %s: %w\n%s", dir, err, out.String())
	}
	// An empty dir in the way (made by the caller) goes; anything else stays
	// and makes the rename fail loudly.
	_ = os.Remove(dir)
	if err := os.Rename(staging, dir); err != nil {
		return fmt.Errorf("pglocal: move the new cluster into %s: %w", dir, err)
	}
	ok = true
	log.Info("postgres cluster initialised", zap.String("data_dir", dir), zap.Duration("took", time.Since(start)))
	return nil
}

// runCredential decides which account the server runs as: the caller's own,
// unless the caller is root, which PostgreSQL refuses.
func runCredential(name string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	names := []string{name}
	if name == "" {
		names = []string{"postgres", "nobody"}
	}
	for _, n := range names {
		u, err := user.Lookup(n)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("pglocal: running as root, and PostgreSQL refuses root, but no unprivileged account %v exists to run it as; create one (useradd -r postgres) or run as a normal user", names)
}

func chownIfNeeded(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
		return fmt.Errorf("pglocal: hand %s to uid %d: %w", path, cred.Uid, err)
	}
	return nil
}

// checkReachable fails early, with a useful message, when the unprivileged
// server account could not even reach its data dir (e.g. one under /root).
func checkReachable(dir string, cred *syscall.Credential) error {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("pglocal: %w", err)
		}
		sys, _ := st.Sys().(*syscall.Stat_t)
		mode := st.Mode().Perm()
		ok := mode&0o001 != 0 ||
			(sys != nil && sys.Uid == cred.Uid && mode&0o100 != 0) ||
			(sys != nil && sys.Gid == cred.Gid && mode&0o010 != 0)
		if !ok {
			return fmt.Errorf("pglocal: the server runs as uid %d, which cannot enter %s (mode %v) on the way to data dir %s; choose a data dir it can reach (e.g. under /var/lib or /tmp)", cred.Uid, p, mode, dir)
		}
		if p == "/" || p == filepath.Dir(p) {
			return nil
		}
	}
}

// runningPostmaster reports a live server already using dataDir.
func runningPostmaster(dataDir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if errors.Is(err, fs.ErrNotExist) || err != nil {
		return 0, false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return 0, false
	}
	// A recycled pid could belong to anything; only a postgres counts.
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(comm)), "postgres") {
		return 0, false
	}
	return pid, true
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
