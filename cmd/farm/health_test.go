package main

import (
	"net"
	"net/http"
	"strings"
	"testing"
)

// healthEndpoint serves an always-healthy /healthz on a free loopback port.
func healthEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: healthHandler(func() error { return nil })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dead.Addr().String()
	dead.Close()
	return addr
}

// TestHealthAddrFlagBeatsEnvironment: the image bakes FARM_HEALTH_ADDR (the
// consumer's), and a producer's healthcheck names its own address with
// --addr: the command line wins over every variable of the setting.
func TestHealthAddrFlagBeatsEnvironment(t *testing.T) {
	live, dead := healthEndpoint(t), deadAddr(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"--addr over FARM_HEALTH_ADDR", map[string]string{"FARM_HEALTH_ADDR": dead}, []string{"--addr", live}},
		{"--health-addr over FARM_ADDR", map[string]string{"FARM_ADDR": dead}, []string{"--health-addr", live}},
		{"--addr over both", map[string]string{"FARM_ADDR": dead, "FARM_HEALTH_ADDR": dead}, []string{"--addr", live}},
		{"FARM_HEALTH_ADDR alone", map[string]string{"FARM_HEALTH_ADDR": live}, nil},
		{"FARM_ADDR, the command's own, over FARM_HEALTH_ADDR", map[string]string{"FARM_ADDR": live, "FARM_HEALTH_ADDR": dead}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := farmRun(t, "", tc.env, append([]string{"health"}, tc.args...)...)
			if code != exitOK || !strings.Contains(out, "ok") {
				t.Errorf("farm health %q with %v: code %d, stdout %q, stderr %q", tc.args, tc.env, code, out, errOut)
			}
		})
	}
}

// TestHealthTimeoutIsNotSubmitsTimeout: FARM_TIMEOUT is `farm submit`'s
// bound on one render; the health check's own bound is FARM_HEALTH_TIMEOUT.
func TestHealthTimeoutIsNotSubmitsTimeout(t *testing.T) {
	live := healthEndpoint(t)
	// 1ns ends the check before it can connect, wherever it is read.
	code, out, errOut := farmRun(t, "", map[string]string{"FARM_TIMEOUT": "1ns"}, "health", "--addr", live)
	if code != exitOK || !strings.Contains(out, "ok") {
		t.Errorf("farm health with FARM_TIMEOUT=1ns: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, _, errOut = farmRun(t, "", map[string]string{"FARM_HEALTH_TIMEOUT": "1ns"}, "health", "--addr", live)
	if code != exitError || !strings.Contains(errOut, "deadline exceeded") {
		t.Errorf("farm health with FARM_HEALTH_TIMEOUT=1ns: code %d, stderr %q, want a timed-out check", code, errOut)
	}
	if code, _, errOut = farmRun(t, "", nil, "health", "--addr", live, "--timeout", "1ns"); code != exitError {
		t.Errorf("farm health --timeout 1ns: code %d, stderr %q, want a timed-out check", code, errOut)
	}
}
