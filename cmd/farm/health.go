package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// runHealth is `farm health`: it asks a consumer's health endpoint and exits
// 0 when it answers 200, 1 otherwise — the Docker HEALTHCHECK command.
func runHealth(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet("health", "[flags]", env.stderr)
	var addr string
	var timeout time.Duration
	// --health-addr is the consumer's own flag, so one FARM_HEALTH_ADDR
	// configures both the endpoint and its check. Either on the command
	// line beats both variables: the image bakes FARM_HEALTH_ADDR, and a
	// producer's healthcheck names its --listen address with --addr.
	fs.StringVar(&addr, "addr", "127.0.0.1:9091", "address of the consumer's health endpoint (as its --health-addr)")
	fs.StringVar(&addr, "health-addr", "127.0.0.1:9091", "same as --addr")
	fs.alias("addr", "health-addr")
	// FARM_TIMEOUT is `farm submit`'s bound on one render: the check's own
	// bound has its own variable, FARM_HEALTH_TIMEOUT.
	fs.positive(&timeout, "health-timeout", 5*time.Second, "give up after this long")
	fs.positive(&timeout, "timeout", 5*time.Second, "same as --health-timeout")
	fs.alias("health-timeout", "timeout")
	fs.commandLineOnly("timeout")
	if err := fs.parseNoArgs(args, env.getenv); err != nil {
		return err
	}
	if addr == "" {
		return usagef("--addr is required")
	}
	addrFlag := "addr"
	if fs.onCommandLine("health-addr") || (!fs.onCommandLine("addr") && env.getenv(envName("addr")) == "") {
		addrFlag = "health-addr"
	}
	if err := checkListenAddr(addrFlag, addr); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := "http://" + addr + "/healthz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return usagef("--%s %q: %v", addrFlag, addr, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	msg := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health check: %s: %s", resp.Status, msg)
	}
	fmt.Fprintln(env.stdout, msg)
	return nil
}
