package main

import (
	"net"
	"strings"
	"testing"
)

func TestMalformedHealthAddrIsAUsageError(t *testing.T) {
	code, _, errOut := farmRun(t, "", nil, "consumer", "--health-addr", "9091",
		"--database-url", "postgres://x@127.0.0.1:1/x", "--database-wait", "0")
	if code != exitUsage || !strings.Contains(errOut, "--health-addr") {
		t.Errorf("farm consumer --health-addr 9091: code %d, stderr %q", code, errOut)
	}
}

// TestMalformedListenAddrs: every address flag a process binds is checked
// before the database is waited for: exit 2, naming the flag. The database
// is unreachable, so a check that came only at bind time would exit 1.
func TestMalformedListenAddrs(t *testing.T) {
	db := []string{"--database-url", "postgres://x@127.0.0.1:1/x", "--database-wait", "0"}
	for _, tc := range []struct {
		cmd, flag, addr string
	}{
		{"consumer", "health-addr", "9091"},
		{"consumer", "health-addr", "127.0.0.1:99999"},
		{"consumer", "health-addr", "127.0.0.1:http"},
		{"consumer", "health-addr", "127.0.0.1:"},
		{"consumer", "health-addr", "::1:9091"},
		{"producer", "listen", "8080"},
		{"producer", "listen", "0.0.0.0:70000"},
		{"up", "listen", "localhost"},
		{"health", "addr", "9091"},
		{"health", "health-addr", "127.0.0.1:-1"},
	} {
		t.Run(tc.cmd+" --"+tc.flag+" "+tc.addr, func(t *testing.T) {
			args := append([]string{tc.cmd, "--" + tc.flag, tc.addr}, db...)
			switch tc.cmd {
			case "health":
				args = args[:3]
			case "up":
				args = append(args[:3], "--database-url", "postgres://x@127.0.0.1:1/x", "--data-dir", t.TempDir())
			}
			code, _, errOut := farmRun(t, "", nil, args...)
			if code != exitUsage || !strings.Contains(errOut, "--"+tc.flag) {
				t.Errorf("farm %s --%s %s: code %d, stderr %q, want exit %d naming --%s", tc.cmd, tc.flag, tc.addr, code, errOut, exitUsage, tc.flag)
			}
		})
	}
}

// TestHealthAddrInUseFailsAtOnce: a consumer whose health address another
// process holds says so, as a usage error, before it waits for the
// database (which here would never come).
func TestHealthAddrInUseFailsAtOnce(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	code, _, errOut := farmRun(t, "", nil, "consumer", "--health-addr", taken.Addr().String(),
		"--database-url", "postgres://x@127.0.0.1:1/x", "--database-wait", "0")
	if code != exitUsage || !strings.Contains(errOut, "--health-addr") || !strings.Contains(errOut, "in use") {
		t.Errorf("farm consumer --health-addr %s (taken): code %d, stderr %q, want exit %d saying it is in use", taken.Addr(), code, errOut, exitUsage)
	}
}
