package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	"github.com/browserfarm/browserfarm/internal/pid1"
)

// runInit is `farm init [--] PROGRAM [ARGS...]`: the container image's PID 1
// (package pid1). It takes no flags of its own, so that everything after it
// is the command's; its exit status is the command's.
func runInit(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet("init", "[--] PROGRAM [ARGS...]\n\nRun PROGRAM as a container's init: pass it the signals the container gets, reap\norphaned processes, exit with its status (128+n if signal n ended it).", env.stderr)
	if err := fs.Parse(args); err != nil {
		return fs.parseError(err)
	}
	if fs.NArg() == 0 {
		return usagef("a program to run is required: farm init -- farm consumer")
	}
	argv := fs.Args()
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return usagef("program %q: %v", argv[0], err)
	}
	status, err := pid1.Run(ctx, pid1.Command{
		Path: path, Args: argv, Env: env.variables(),
		Stdin: osFile(env.stdin), Stdout: osFile(env.stdout), Stderr: osFile(env.stderr),
	})
	if err != nil {
		return err
	}
	if status != 0 {
		return exitStatus(status)
	}
	return nil
}

// osFile is the file behind one of the environment's streams; nil (the
// null device for the command, pid1.Command) when it is not a file.
func osFile(v any) *os.File {
	f, _ := v.(*os.File)
	return f
}

// exitStatus makes realMain exit with this code, a child's that the command
// passes on as its own.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
