package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/farm"
	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// farm up runs the producer and the consumers: a heartbeat interval at or
// past the stale age (its own --stale-after, or the consumers' id check)
// would have every node declared lost between beats. It also refuses more
// demo jobs than one batch holds, before it starts anything.
func TestUpRefusesAHeartbeatPastTheStaleAge(t *testing.T) {
	code, _, stderr := farmRun(t, "", nil, "up", "--demo", "--demo-jobs", "100001")
	if code != exitUsage || !strings.Contains(stderr, "--demo-jobs 100001") {
		t.Errorf("farm up --demo-jobs 100001: exit %d, %q; want %d naming the flag, before anything starts", code, stderr, exitUsage)
	}
	for _, args := range [][]string{{"--heartbeat-interval", "20s"}, {"--stale-after", "2s"}} {
		code, _, stderr := farmRun(t, "", nil, append([]string{"up"}, args...)...)
		if code != exitUsage || !strings.Contains(stderr, "--heartbeat-interval") || !strings.Contains(stderr, "must be under") {
			t.Errorf("farm up %v: exit %d, %q; want %d naming --heartbeat-interval", args, code, stderr, exitUsage)
		}
	}
}

// parseConsumerFlags parses a consumer's flags from args and the
// environment env, and checks them.
func parseConsumerFlags(args []string, env map[string]string) (*consumerOptions, error) {
	fs := newFlagSet("consumer", "", &bytes.Buffer{})
	var o consumerOptions
	o.register(fs)
	if err := fs.parse(args, func(k string) string { return env[k] }); err != nil {
		return nil, err
	}
	return &o, o.check()
}

func TestConsumerFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
	}{
		{"defaults", nil, nil, ""},
		{"bad capacity", []string{"--capacity", "0"}, nil, "--capacity 0"},
		{"negative recycle", nil, map[string]string{"FARM_CHROME_RECYCLE_JOBS": "-1"}, "--chrome-recycle-jobs -1"},
		{"bad node id", []string{"--node-id", "a b"}, nil, "--node-id"},
		{"zero heartbeat", []string{"--heartbeat-interval", "0s"}, nil, "--heartbeat-interval"},
		{"heartbeat at the stale age", []string{"--heartbeat-interval", "15s"}, nil, "--heartbeat-interval 15s: must be under 15s"},
		{"heartbeat under it", []string{"--heartbeat-interval", "5s"}, nil, ""},
		{"poll past half the claim timeout", []string{"--poll-interval", "31s"}, nil, "--poll-interval 31s: use at most 30s"},
		{"poll at half the claim timeout", []string{"--poll-interval", "30s"}, nil, ""},
		{"memory ceiling that would wrap", []string{"--chrome-memory-ceiling-mb", "17592186044417"}, nil, "--chrome-memory-ceiling-mb 17592186044417"},
		{"memory ceiling of 1 PiB", []string{"--chrome-memory-ceiling-mb", "1073741824"}, nil, ""},
		{"protection without a group", []string{"--aws-instance-protection"}, nil, "needs --aws-asg-name"},
		{"wake URL", []string{"--wake-url", "http://producer:8080", "--wake-token", "t"}, nil, ""},
		{"bad wake URL", []string{"--wake-url", "producer:8080"}, nil, "--wake-url"},
		{"wake token without URL", nil, map[string]string{"FARM_WAKE_TOKEN": "t"}, "--wake-token needs --wake-url"},
		{"malformed env", nil, map[string]string{"FARM_CAPACITY": "six"}, "FARM_CAPACITY"},
		{"chrome env", []string{"--chrome-env", "WRAPPER_HOME, MALLOC_ARENA_MAX"}, nil, ""},
		{"chrome env not a name", []string{"--chrome-env", "A,B=1"}, nil, `--chrome-env "B=1": not an environment variable name`},
		{"chrome env of a secret", nil, map[string]string{"FARM_CHROME_ENV": "PATH,FARM_DATABASE_URL"}, "--chrome-env FARM_DATABASE_URL: a farm credential"},
		{"chrome env of AWS credentials", []string{"--chrome-env", "AWS_SECRET_ACCESS_KEY"}, nil, "--chrome-env AWS_SECRET_ACCESS_KEY: a farm credential"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConsumerFlags(tc.args, tc.env)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			var ue *usageError
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.As(err, &ue) {
				t.Fatalf("err = %v, want a usage error containing %q", err, tc.wantErr)
			}
		})
	}

	o, err := parseConsumerFlags([]string{"--capacity", "4", "--drain-timeout", "0s", "--chrome-flags", "--a  --b=1"},
		map[string]string{"FARM_EXIT_AFTER_JOBS": "40", "FARM_CHROME_MEMORY_CEILING_MB": "512", "FARM_NODE_ID": "n-1"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := o.consumerConfig(jobqueue.New(nil, jobqueue.Config{}), zap.NewNop(), nil)
	if cfg.NodeID != "n-1" || cfg.Capacity != 4 || cfg.Supervisor.Capacity != 4 || cfg.Supervisor.ExitAfterJobs != 40 ||
		cfg.Supervisor.ChromeRecycleJobs != 20 || cfg.Supervisor.MemoryCeilingBytes != 512<<20 {
		t.Errorf("config = %+v", cfg)
	}
	if cfg.DrainTimeout >= 0 {
		t.Errorf("--drain-timeout 0 gave DrainTimeout %v, want negative (no grace)", cfg.DrainTimeout)
	}
	if cfg.Supervisor.Browser.NoSandbox {
		t.Error("NoSandbox set without --chrome-no-sandbox")
	}
	if o, err := parseConsumerFlags(nil, map[string]string{"FARM_CHROME_NO_SANDBOX": "true"}); err != nil ||
		!o.consumerConfig(jobqueue.New(nil, jobqueue.Config{}), zap.NewNop(), nil).Supervisor.Browser.NoSandbox {
		t.Errorf("FARM_CHROME_NO_SANDBOX=true did not reach the browser options (%v)", err)
	}
	if !reflect.DeepEqual(cfg.Supervisor.Browser.ExtraFlags, []string{"--a", "--b=1"}) {
		t.Errorf("ExtraFlags = %q", cfg.Supervisor.Browser.ExtraFlags)
	}
}

// Chrome gets what it reads of the environment and what --chrome-env
// (or FARM_CHROME_ENV) names, in the environment's order; never the farm's
// credentials or other variables.
func TestConsumerChromeEnv(t *testing.T) {
	environ := []string{"PATH=/usr/bin", "FARM_DATABASE_URL=postgres://u:pw@db/farm", "TZ=UTC", "FARM_WAKE_TOKEN=w",
		"AWS_SECRET_ACCESS_KEY=k", "LC_ALL=C", "WRAPPER_HOME=/opt/w", "PGPASSWORD=pw", "https_proxy=http://proxy:3128", "OTHER=x"}
	for _, tc := range []struct {
		args    []string
		env     map[string]string
		environ []string
		want    []string
	}{
		{nil, nil, environ, []string{"PATH=/usr/bin", "TZ=UTC", "LC_ALL=C"}},
		{[]string{"--chrome-env", "WRAPPER_HOME,MISSING"}, nil, environ, []string{"PATH=/usr/bin", "TZ=UTC", "LC_ALL=C", "WRAPPER_HOME=/opt/w"}},
		{nil, map[string]string{"FARM_CHROME_ENV": "OTHER"}, environ, []string{"PATH=/usr/bin", "TZ=UTC", "LC_ALL=C", "OTHER=x"}},
		// Nothing Chrome reads: an empty environment, not the default (nil).
		{nil, nil, []string{"FARM_API_TOKEN=t"}, []string{}},
	} {
		o, err := parseConsumerFlags(tc.args, tc.env)
		if err != nil {
			t.Fatal(err)
		}
		got := o.consumerConfig(jobqueue.New(nil, jobqueue.Config{}), zap.NewNop(), tc.environ).Supervisor.Browser.Env
		if !slices.Equal(got, tc.want) || got == nil {
			t.Errorf("%q %v: Chrome's environment %#v, want %#v", tc.args, tc.env, got, tc.want)
		}
	}
}

func TestHealthCommand(t *testing.T) {
	var mu sync.Mutex
	var state error
	srv := httptest.NewServer(healthHandler(func() error {
		mu.Lock()
		defer mu.Unlock()
		return state
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	env := func(out *bytes.Buffer) *environment {
		return &environment{stdout: out, stderr: out, getenv: func(string) string { return "" }}
	}

	var out bytes.Buffer
	if err := runHealth(context.Background(), env(&out), []string{"--addr", addr}); err != nil {
		t.Fatalf("healthy endpoint: %v", err)
	}
	mu.Lock()
	state = errors.New("no live Chrome")
	mu.Unlock()
	err := runHealth(context.Background(), env(&out), []string{"--addr", addr})
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "no live Chrome") {
		t.Errorf("unhealthy endpoint: err = %v, want 503 with the reason", err)
	}
	// The consumer's own variable configures the check too.
	err = runHealth(context.Background(), &environment{stdout: &out, stderr: &out,
		getenv: func(k string) string { return map[string]string{"FARM_HEALTH_ADDR": addr}[k] }}, nil)
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("FARM_HEALTH_ADDR: err = %v, want the endpoint's 503", err)
	}
	srv.Close()
	if err := runHealth(context.Background(), env(&out), []string{"--addr", addr, "--timeout", "2s"}); err == nil {
		t.Error("a closed endpoint counted as healthy")
	}
}

// TestConsumerCommandRecycles runs `farm consumer` in-process with
// --exit-after-jobs 2: /healthz answers 200 while it works, and it ends with
// errRecycle (exit code 75) after its two jobs.
func TestConsumerCommandRecycles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	url, q := migratedDB(t)
	site := testutil.StartSite(t, testsite.Options{Items: 10})
	_, ids, err := q.Enqueue(context.Background(), []jobqueue.Spec{
		{URL: site.URL + "/page/1?delay=300", Wait: &jobqueue.Wait{Selector: "#ready"}},
		{URL: site.URL + "/page/2?delay=300", Wait: &jobqueue.Wait{Selector: "#ready"}},
		{URL: site.URL + "/page/3", Wait: &jobqueue.Wait{Selector: "#ready"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	healthAddr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			_, _ = q.Assign(ctx, "cmd-node", 2)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runConsumer(ctx, &environment{stdout: &bytes.Buffer{}, stderr: &lockedBuffer{b: &out}, getenv: func(string) string { return "" }},
			[]string{"--database-url", url, "--node-id", "cmd-node", "--capacity", "2", "--exit-after-jobs", "2",
				"--health-addr", healthAddr, "--chrome-profile-root", t.TempDir(), "--log-level", "warn",
				"--allow-destination", strings.TrimPrefix(site.URL, "http://")})
	}()

	healthy := false
	deadline := time.Now().Add(time.Minute)
	for !healthy && time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("consumer ended before /healthz answered 200: %v", err)
		default:
		}
		resp, err := http.Get("http://" + healthAddr + "/healthz")
		if err == nil {
			healthy = resp.StatusCode == http.StatusOK
			resp.Body.Close()
		}
		if !healthy {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !healthy {
		t.Fatal("/healthz never answered 200")
	}
	select {
	case err := <-done:
		if !errors.Is(err, errRecycle) {
			t.Fatalf("runConsumer = %v, want errRecycle", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("consumer did not exit after its 2 jobs")
	}
	completed := 0
	for _, id := range ids {
		j, err := q.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == jobqueue.StateCompleted {
			completed++
		}
	}
	if completed != 2 {
		t.Errorf("completed %d jobs, want exactly 2", completed)
	}
	if _, err := http.Get("http://" + healthAddr + "/healthz"); err == nil {
		t.Error("the health endpoint still answers after the consumer exited")
	}
}

// lockedBuffer serialises writes from the consumer's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is what was written so far.
func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestConsumerFencedIsAUsageError: a consumer whose node id another
// process took stops with exit 64, which the respawn parent, farm up and
// systemd do not restart. It exited 0, which the respawn parent restarts,
// to be refused the id or to take it back from the other process. A
// consumer whose node row is gone (the producer deletes a node it declared
// lost a day before, which a process cut off from the database for that
// long outlives) is fenced too, but nobody holds the id: it stops with an
// error that is restarted, to register again, where it exited 64 and
// stayed down.
func TestConsumerFencedIsAUsageError(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	for _, tc := range []struct {
		name, log string
		fence     func(t *testing.T, q *jobqueue.Queue, node jobqueue.Node)
		usage     bool
	}{
		{"superseded", "another process registered this node id", func(t *testing.T, q *jobqueue.Queue, node jobqueue.Node) {
			// Another process takes the id, as one that proved the holder dead.
			if _, _, err := q.Register(t.Context(), jobqueue.NodeInfo{ID: node.ID, Hostname: "elsewhere", Capacity: 1,
				Replaces: node.Incarnation}); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"removed", "the node's registration is gone", func(t *testing.T, q *jobqueue.Queue, node jobqueue.Node) {
			if _, err := q.Pool().Exec(t.Context(), "DELETE FROM nodes WHERE id = $1", node.ID); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, q := migratedDB(t)
			stop, logs := runNode(t, url, "dup-node")
			var node jobqueue.Node
			testutil.Eventually(t, time.Minute, "the consumer registered", func() bool {
				n, err := q.GetNode(t.Context(), "dup-node")
				node = n
				return err == nil && n.State == jobqueue.NodeActive
			})
			tc.fence(t, q, node)
			testutil.Eventually(t, time.Minute, "the fenced consumer stopped", func() bool {
				return strings.Contains(logs.String(), tc.log)
			})
			err := stop()
			var ue *usageError
			switch {
			case tc.usage && (!errors.As(err, &ue) || !strings.Contains(err.Error(), "--node-id")):
				t.Fatalf("runConsumer = %v, want a usage error naming --node-id", err)
			case !tc.usage && (err == nil || errors.As(err, &ue) || !errors.Is(err, farm.ErrFenced) || !strings.Contains(err.Error(), "a restart registers it again")):
				t.Fatalf("runConsumer = %v, want an error, not a usage error, saying a restart registers the node again", err)
			}
		})
	}
}
