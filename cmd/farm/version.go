package main

import (
	"context"
	"fmt"
	"runtime"
)

func runVersion(_ context.Context, env *environment, args []string) error {
	fs := newFlagSet("version", "", env.stderr)
	if err := fs.parse(args, env.getenv); err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "farm %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
