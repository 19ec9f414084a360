package main

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// TestProducerBeyondLoopbackNeedsAReadToken: a producer that would serve
// reads beyond loopback without any token refuses to start, naming the flag.
func TestProducerBeyondLoopbackNeedsAReadToken(t *testing.T) {
	url, _ := migratedDB(t)
	code, _, errOut := farmRun(t, "", map[string]string{"FARM_DATABASE_URL": url}, "producer", "--listen", "0.0.0.0:0")
	if code != exitUsage || !strings.Contains(errOut, "--read-token") {
		t.Fatalf("code %d stderr %q; want a usage error naming --read-token", code, errOut)
	}
}

// TestProducerNeedsAReadTokenBeforeTheDatabase: an address known to be
// beyond loopback is refused at once, not after waiting for the database
// and migrating it.
func TestProducerNeedsAReadTokenBeforeTheDatabase(t *testing.T) {
	noDB := map[string]string{"FARM_DATABASE_URL": "postgres://x@127.0.0.1:1/x", "FARM_DATABASE_WAIT": "0"}
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:8080"} {
		code, _, errOut := farmRun(t, "", noDB, "producer", "--listen", addr)
		if code != exitUsage || !strings.Contains(errOut, "--read-token") {
			t.Errorf("--listen %s, no database: code %d stderr %q; want a usage error naming --read-token", addr, code, errOut)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:8080": false, "[::1]:0": false, "localhost:8080": false,
		"farm.internal:8080": false, "0.0.0.0:8080": true, ":8080": true, "10.0.0.5:8080": true, "[2001:db8::1]:80": true} {
		if got := listenBeyondLoopback(addr); got != want {
			t.Errorf("listenBeyondLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestProducerRefusesAShortToken: the sample Secret's "change-me", applied
// by mistake, was a working API token.
func TestProducerRefusesAShortToken(t *testing.T) {
	for _, flag := range []string{"--api-token", "--read-token"} {
		code, _, errOut := farmRun(t, "", nil, "producer", flag, "change-me")
		if code != exitUsage || !strings.Contains(errOut, flag) || !strings.Contains(errOut, "at least 16") {
			t.Errorf("producer %s change-me: code %d, stderr %q; want exit %d naming the flag", flag, code, errOut, exitUsage)
		}
	}
}

func TestConsumerEgressFlags(t *testing.T) {
	for _, tc := range []struct{ flag, value, want string }{
		{"--allow-destination", "example.com", "--allow-destination"},
		{"--deny-destination", "10.0.0.0/33", "--deny-destination"},
		{"--max-extract-bytes", "0", "--max-extract-bytes"},
	} {
		code, _, errOut := farmRun(t, "", map[string]string{"FARM_DATABASE_URL": "postgres://127.0.0.1:1/none"}, "consumer", tc.flag, tc.value)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s %s: code %d stderr %q; want a usage error naming %s", tc.flag, tc.value, code, errOut, tc.want)
		}
	}
	o := consumerOptions{allow: "10.1.2.0/24,127.0.0.1:8089", deny: "203.0.113.5:8080", healthAddr: "127.0.0.1:9091"}
	p, err := o.egressPolicy()
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{"10.1.2.3:80": true, "127.0.0.1:8089": true, "127.0.0.1:9091": false,
		"203.0.113.5:8080": false, "127.0.0.2:8089": false, "93.184.216.34:443": true} {
		if got := p.Allowed(netip.MustParseAddrPort(addr)); got != want {
			t.Errorf("%s allowed = %v, want %v", addr, got, want)
		}
	}
	if rules := listenRules("0.0.0.0:8080"); len(rules) == 0 || !rules[0].Matches(netip.MustParseAddrPort(rules[0].Prefix.Addr().String()+":8080")) {
		t.Errorf("listenRules(0.0.0.0:8080) = %v, want the machine's addresses on port 8080", rules)
	}
	// A name, resolved or not, is one of the machine's addresses: before,
	// --health-addr localhost:9091 left the health endpoint open to jobs
	// wherever loopback was allowed.
	o = consumerOptions{allow: "127.0.0.0/8", healthAddr: "localhost:9091"}
	if p, err = o.egressPolicy(); err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{"127.0.0.1:9091": false, "127.0.0.5:9091": false, "127.0.0.1:8000": true} {
		if got := p.Allowed(netip.MustParseAddrPort(addr)); got != want {
			t.Errorf("loopback allowed, health on localhost:9091: %s allowed = %v, want %v", addr, got, want)
		}
	}
	// Loopback allowed on purpose: the health endpoint, listening on every
	// address, answers on all of 127.0.0.0/8 and on ::1, and stays refused
	// there; other ports of loopback stay open.
	o = consumerOptions{allow: "127.0.0.0/8,::1", healthAddr: ":9091"}
	if p, err = o.egressPolicy(); err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{"127.0.0.1:9091": false, "127.0.0.2:9091": false, "127.1.2.3:9091": false,
		"[::1]:9091": false, "127.0.0.2:8000": true, "[::1]:8000": true} {
		if got := p.Allowed(netip.MustParseAddrPort(addr)); got != want {
			t.Errorf("loopback allowed, health on :9091: %s allowed = %v, want %v", addr, got, want)
		}
	}
}

// TestEgressRefusesTheFarmsOwnEndpoints: the node's own addresses but
// loopback on every port, public or private, and its database and producer
// at their ports (even inside a network --allow-destination opens), are
// refused to jobs.
func TestEgressRefusesTheFarmsOwnEndpoints(t *testing.T) {
	self := selfRules([]netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1"), netip.MustParseAddr("10.0.0.9"),
		netip.MustParseAddr("93.184.216.9"), netip.MustParseAddr("2606:2800::9"), netip.MustParseAddr("::ffff:93.184.217.9"),
		netip.MustParseAddr("fd00::2")})
	if len(self) != 5 {
		t.Fatalf("selfRules = %v, want the five addresses but loopback", self)
	}
	o := consumerOptions{allow: "10.0.0.0/8,fd00::/8",
		db:      dbOptions{url: "postgres://farm@10.0.0.7:6432,127.0.0.1:5432/farm"},
		blobs:   blobOptions{url: "s3://blobs/farm?endpoint=http://10.0.0.5:9000&path_style=true"},
		wakeURL: "http://93.184.216.4:8080"}
	p, err := o.egressPolicy()
	if err != nil {
		t.Fatal(err)
	}
	p.Deny = append(append(p.Deny, self...), o.endpointRules(context.Background(), zap.NewNop())...)
	for addr, want := range map[string]bool{
		"10.0.0.7:6432": false, "10.0.0.7:80": true, "10.0.0.5:9000": false, "10.0.0.5:80": true, "127.0.0.1:5432": false, "93.184.216.4:8080": false,
		"93.184.216.4:443": true, "93.184.216.9:22": false, "[2606:2800::9]:5432": false, "93.184.217.9:9100": false,
		"10.0.0.9:22": false, "10.0.0.9:8080": false, "[fd00::2]:18007": false, "[fd00::3]:80": true,
		"93.184.216.34:443": true,
	} {
		if got := p.Allowed(netip.MustParseAddrPort(addr)); got != want {
			t.Errorf("%s allowed = %v, want %v", addr, got, want)
		}
	}
	// A database on a Unix socket has no address to refuse.
	sock := consumerOptions{db: dbOptions{url: "postgres:///farm?host=/run/postgresql"}}
	if rules := sock.endpointRules(context.Background(), zap.NewNop()); len(rules) != 0 {
		t.Errorf("endpointRules for a Unix socket = %v, want none", rules)
	}
}

// TestCommandsLeaveTheProcessUndumpable: a farm process is non-dumpable
// whatever its command, so that Chrome, which runs as the same user, cannot
// read its environment (the database URL, tokens) through /proc.
func TestCommandsLeaveTheProcessUndumpable(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := farmRun(t, "", nil, "version"); code != exitOK {
		t.Fatalf("farm version: code %d, stderr %q", code, errOut)
	}
	if d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err != nil || d != 0 {
		t.Errorf("PR_GET_DUMPABLE = %d (%v) after a command; want 0", d, err)
	}
}
