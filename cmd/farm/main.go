// Command farm is browserfarm's one binary: the producer, the consumer node,
// the one-machine `farm up`, and the operator's tools (submit, status,
// results, cancel, retry, migrate). main is wiring only: it parses flags and
// FARM_* environment variables, builds the logger, and hands explicit
// dependencies to the roles in package farm.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/browserfarm/browserfarm/farm/fleet"
)

// Exit codes. exitRecycle is the consumer's "recycle me": it finished its
// --exit-after-jobs jobs and wants a fresh process. Its number is the
// restart contract with the parent, defined in fleet (farm up's and
// --respawn's restarter) and spelled in the systemd unit and the README.
const (
	exitOK    = 0
	exitError = 1
	// exitUsage is sysexits.h's EX_USAGE, not the usual 2: Go's runtime
	// exits 2 on a panic or a fatal error, a crash that the respawn parent
	// and systemd must restart, where a bad configuration must not be.
	exitUsage   = 64
	exitRecycle = fleet.RecycleExitCode
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *environment, args []string) error
	// ownSignals: the command handles every signal itself, so realMain
	// gives it no stop context (whose second signal exits at once).
	ownSignals bool
}

// environment is what every subcommand gets from main: streams and the
// process environment, passed explicitly so tests can run commands in-process.
type environment struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// environ lists the whole environment (KEY=value), for a child that is
	// given it less the farm's secrets (scalingEnv); nil is an empty one.
	environ func() []string
	args0   string // path of this binary, for `farm up` to start consumers
	// root is the machine's file system, where the limits the process
	// runs under are read (cgroupMemoryLimit); nil reads none.
	root fs.FS
}

// variables returns the environment's variables, none when it has no environ.
func (e *environment) variables() []string {
	if e.environ == nil {
		return nil
	}
	return e.environ()
}

func commands() []command {
	return []command{
		{"up", "run a whole farm on this machine (private PostgreSQL, producer, dashboard, consumers)", runUp, false},
		{"producer", "assign queued jobs to nodes, rescue lost nodes, serve the dashboard and API", runProducer, false},
		{"consumer", "run a consumer node: up to --capacity Chrome sessions, recycled every N jobs", runConsumer, false},
		{"submit", "submit jobs: URLs as arguments, from a file or stdin, or JSON-lines specs", runSubmit, false},
		{"status", "show nodes and queue counts", runStatus, false},
		{"results", "export results as JSON lines or CSV", runResults, false},
		{"cancel", "cancel jobs by id or batch", runCancel, false},
		{"retry", "retry failed or canceled jobs by id or batch", runRetry, false},
		{"migrate", "apply the database schema migrations", runMigrate, false},
		{"health", "check a consumer's /healthz (for container health checks)", runHealth, false},
		{"version", "print the version", runVersion, false},
		{"init", "run a command as a container's PID 1 (the image's entrypoint, in place of tini)", runInit, true},
	}
}

func main() {
	os.Exit(realMain(os.Args, processEnvironment()))
}

// processEnvironment is this process's own streams, variables, binary and
// file system.
func processEnvironment() *environment {
	return &environment{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, environ: os.Environ, args0: os.Args[0], root: os.DirFS("/"),
	}
}

func realMain(args []string, env *environment) int {
	if err := undumpable(); err != nil {
		fmt.Fprintf(env.stderr, "farm: %v\n", err)
		return exitError
	}
	if len(args) < 2 || args[1] == "-h" || args[1] == "--help" || args[1] == "help" {
		usage(env.stderr)
		if len(args) < 2 {
			return exitUsage
		}
		return exitOK
	}
	name := args[1]
	var cmd *command
	for _, c := range commands() {
		if c.name == name {
			cmd = &c
			break
		}
	}
	if cmd == nil {
		fmt.Fprintf(env.stderr, "farm: unknown command %q\n\n", name)
		usage(env.stderr)
		return exitUsage
	}
	ctx := context.Background()
	if !cmd.ownSignals {
		var stop func()
		ctx, stop = signalContext(env.stderr)
		defer stop()
	}
	err := cmd.run(ctx, env, args[2:])
	var status exitStatus
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errHelp):
		return exitOK
	case errors.Is(err, errRecycle):
		return exitRecycle
	case errors.As(err, &status):
		return int(status)
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(env.stderr, "farm %s: %v%s\n", name, err, fromEnvironment(err.Error(), args[2:], env.getenv))
		return exitUsage
	}
	fmt.Fprintf(env.stderr, "farm %s: %v\n", name, err)
	return exitError
}

// undumpable makes this process non-dumpable: its /proc/PID files, environ
// and mem among them, become root's, and no process of its user may read
// them or ptrace it. Chrome runs as the same user (in the container image
// without its own sandbox), and a page that took over a renderer could
// otherwise read the database URL and tokens from the environment of the
// consumer or of its respawn parent. The kernel makes Chrome dumpable again
// at its exec, so the node still reads its processes' memory use; root
// still reads everything.
func undumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}

// flagMention is a flag named in an error message.
var flagMention = regexp.MustCompile(`--([a-z0-9][a-z0-9-]*)`)

// fromEnvironment points a usage error's reader at the environment when a
// flag it names is not on the command line but its variable is set:
// "--api-token: 9 characters" is about FARM_API_TOKEN then. It says ""
// when the error names no such flag, or names the variable already.
func fromEnvironment(msg string, args []string, getenv func(string) string) string {
	var vars []string
	seen := map[string]bool{}
	for _, m := range flagMention.FindAllStringSubmatch(msg, -1) {
		name := m[1]
		v := envName(name)
		if seen[name] || strings.Contains(msg, v) || getenv(v) == "" || onCommandLine(name, args) {
			continue
		}
		seen[name] = true
		vars = append(vars, v)
	}
	if len(vars) == 0 {
		return ""
	}
	return fmt.Sprintf(" (set by %s in the environment, not on the command line)", strings.Join(vars, ", "))
}

// onCommandLine reports whether args set the flag (--name, -name, with or
// without =value).
func onCommandLine(name string, args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: farm <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'farm <command> --help' for a command's flags. Every flag can also be set")
	fmt.Fprintln(w, "by an environment variable: --database-url is FARM_DATABASE_URL (flag beats env beats default).")
	fmt.Fprintf(w, "\nexit codes: %d ok, %d error, %d bad usage, %d consumer asks to be restarted (recycle)\n",
		exitOK, exitError, exitUsage, exitRecycle)
}

// errRecycle makes realMain exit with exitRecycle.
var errRecycle = errors.New("recycle: process exit requested after --exit-after-jobs jobs")

// usageError is a bad flag or argument: exitUsage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// stopSignals start a graceful stop. SIGHUP is one: a `farm up` whose
// terminal closes would otherwise die at once, leaving its consumers and
// PostgreSQL to their parent-death signal while they drain, with no
// producer to hand work back to.
var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// signalContext is canceled by the first stop signal, which starts a
// graceful stop (consumers drain, which can take a while). A second signal
// exits at once: children then clean up after themselves (consumers drain
// on their parent-death signal, Chrome is killed with its consumer,
// PostgreSQL shuts down fast). The parent-death signal farm up and
// --respawn give their children (fleet.ParentGoneSignal) starts the drain
// too, and never cuts one short; from then on the process's output may be
// a pipe nobody reads, whose first write would otherwise kill it (SIGPIPE)
// mid-drain.
func signalContext(stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, stopSignals...)
	gone := make(chan os.Signal, 1)
	signal.Notify(gone, fleet.ParentGoneSignal)
	done := make(chan struct{})
	go func() {
		stopping, orphaned := false, false
		for {
			select {
			case <-gone:
				// It can come more than once: the kernel sends it as each
				// thread of the dying parent that the process was handed
				// to exits.
				if orphaned {
					continue
				}
				orphaned = true
				signal.Ignore(syscall.SIGPIPE)
				if stopping {
					fmt.Fprintln(stderr, "farm: the parent process is gone; the drain goes on")
				}
				stopping = true
				cancel()
			case <-sigs:
				if stopping {
					fmt.Fprintln(stderr, "farm: second signal; exiting now without waiting for the drain")
					os.Exit(exitError)
				}
				stopping = true
				cancel()
			case <-done:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		signal.Stop(gone)
		close(done)
		cancel()
	}
}
