package browser

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
)

// shortTempDir is a temp dir with a short path (Chrome's socket paths are
// limited), removed at the end of the test.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "bft-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// processesUnder lists live processes whose command line has a path under
// root: every Chrome process of a Browser whose ProfileRoot is root (Chrome's
// children pass --user-data-dir, its crash handler a database inside it).
func processesUnder(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	marker := []byte(root + "/")
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if st, err := parseStat(stat); err != nil || st.state == 'Z' || st.state == 'X' {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(cmdline, marker) {
			out = append(out, e.Name()+": "+string(bytes.ReplaceAll(cmdline[:min(len(cmdline), 120)], []byte{0}, []byte{' '})))
		}
	}
	return out
}

// settleGoroutines polls until at most want goroutines run, and reports the
// stacks if they do not settle: goroutines end asynchronously after Kill
// and Close return (the http server's, chromedp's readers).
func settleGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := goruntime.NumGoroutine()
		if n <= want {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:goruntime.Stack(buf, true)]
			t.Fatalf("%d goroutines, want at most %d:\n%s", n, want, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLaunchKill30 launches and kills Chrome 30 times with sessions open
// (one of them mid-preparation, one having rendered), and then finds no
// Chrome process of ours, no profile directory and no goroutine left over.
func TestLaunchKill30(t *testing.T) {
	site := testutil.StartSite(t, testsite.Options{})
	root := shortTempDir(t)
	ctx := context.Background()
	settleGoroutines(t, goruntime.NumGoroutine())
	baseline := goruntime.NumGoroutine()

	var seenPIDs []int
	for i := range 30 {
		b, err := Launch(ctx, Options{ProfileRoot: root, ExtraFlags: testFlags})
		if err != nil {
			t.Fatalf("launch %d: %v", i, err)
		}
		seenPIDs = append(seenPIDs, b.PID())
		s1, err := b.NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := b.NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			if _, err := s1.Render(ctx, Request{URL: site.URL + "/page/1", Wait: Wait{Selector: "#ready"}}); err != nil {
				t.Fatalf("render on launch %d: %v", i, err)
			}
			m, err := b.Memory(ctx)
			if err != nil || m.Processes < 3 || m.PSSBytes == 0 || m.PSSBytes > m.RSSBytes {
				t.Fatalf("memory %+v, %v", m, err)
			}
		}
		// Two concurrent Kills: both wait for the one kill and agree.
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for k := range errs {
			wg.Go(func() { errs[k] = b.Kill() })
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("kill %d: %v / %v", i, errs[0], errs[1])
		}
		select {
		case <-b.Done():
		default:
			t.Fatal("Done is open after Kill")
		}
		// Sessions of a killed Chrome fail fast and close cleanly.
		_, err = s2.Render(ctx, Request{URL: site.URL + "/page/1"})
		wantClass(t, err, ClassCrashed, true)
		if err := s1.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(b.ProfileDir()); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("profile dir %s left: %v", b.ProfileDir(), err)
		}
	}
	if left := processesUnder(t, root); len(left) > 0 {
		t.Fatalf("chrome processes left:\n%s", strings.Join(left, "\n"))
	}
	for _, pid := range seenPIDs {
		// The main processes were reaped: they are not even zombies.
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			if data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil && bytes.Contains(data, []byte(root)) {
				t.Fatalf("chrome %d still exists", pid)
			}
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil || len(entries) != 0 {
		t.Fatalf("profile root holds %d entries (%v)", len(entries), err)
	}
	settleGoroutines(t, baseline)
}

// holdSignal is a server whose /hold requests are never answered, not even
// with headers, until the client goes away: a render of /hold is still in
// Page.navigate, which ends only when the document commits. requested
// tells the test that Chrome asked for it.
func holdSignal(t *testing.T) (*httptest.Server, <-chan struct{}) {
	requested := make(chan struct{}, 16)
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/hold" {
			http.NotFound(w, r)
			return
		}
		requested <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })
	return srv, requested
}

// TestChromeDies covers a Chrome that stops answering (SIGSTOP) and one
// that dies in the middle of a render (SIGKILL to the main process).
func TestChromeDies(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	ctx := context.Background()
	e.usable(t, s)
	// The session's tab is wiped and ready: the next job gets it without a
	// call to Chrome, and meets the stopped Chrome in its setup.
	waitPrepared(t, s)
	pid := e.b.PID()

	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The clock starts before the deadline is set: the other way round,
	// the measured time can fall a fraction of a millisecond short of it.
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err := e.b.Healthy(hctx)
	cancel()
	wantClass(t, err, ClassUnresponsive, true)
	wantDuration(t, time.Since(start), 500*time.Millisecond, 500*time.Millisecond+slack)
	// None of these jobs' pages was asked for: their failures are the
	// Chrome's (FailedBeforePage), whatever the jobs are. The first fails
	// in its tab's setup (its headers), the second getting a tab (the
	// first's was given up, and its replacement is not made).
	_, err, took := render(t, s, Request{URL: e.url("/page/1"), Headers: map[string]string{"X-Job": "1"}, Timeout: time.Second})
	wantClass(t, err, ClassUnresponsive, true)
	wantDuration(t, took, time.Second, time.Second+healthProbe+slack)
	if !FailedBeforePage(err) {
		t.Errorf("job whose setup met a stopped Chrome: %v, want it failed before its page", err)
	}
	_, err, took = render(t, s, Request{URL: e.url("/page/1"), Timeout: time.Second})
	wantClass(t, err, ClassUnresponsive, true)
	wantDuration(t, took, time.Second, time.Second+healthProbe+slack)
	if !FailedBeforePage(err) {
		t.Errorf("job on a stopped Chrome: %v, want it failed before its page", err)
	}
	// A job on a new session: its browser context is never made, and the
	// bounded call's end is Chrome's failure, not an internal one.
	_, err, took = render(t, e.session(t), Request{URL: e.url("/page/1"), Timeout: time.Minute})
	wantClass(t, err, ClassUnresponsive, true)
	wantDuration(t, took, closeWait, closeWait+healthProbe+slack)
	if !FailedBeforePage(err) {
		t.Errorf("job on a new session of a stopped Chrome: %v, want it failed before its page", err)
	}
	if err := syscall.Kill(-pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	e.usable(t, s)

	// Killed while Page.navigate waits for a document that never commits.
	srv, requested := holdSignal(t)
	const timeout = time.Minute
	done := renderAsync(s, Request{URL: srv.URL + "/hold", Timeout: timeout})
	select {
	case <-requested:
	case o := <-done:
		t.Fatalf("render ended before chrome asked for the page: %v", o.err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	o := <-done // bounded by the render's own timeout
	wantClass(t, o.err, ClassCrashed, true)
	if o.took >= timeout {
		t.Fatalf("render ended at its timeout (%v), not when chrome died", o.took)
	}
	if FailedBeforePage(o.err) {
		t.Errorf("job whose page Chrome had asked for: %v, want it not failed before its page", o.err)
	}
	// Done closes a moment after the render saw Chrome gone; the guard
	// is far above that moment.
	select {
	case <-e.b.Done():
	case <-time.After(timeout):
		t.Fatal("Done not closed after chrome died")
	}
	wantClass(t, e.b.Healthy(ctx), ClassCrashed, true)
	if _, err := e.b.NewSession(ctx); ClassOf(err) != ClassCrashed {
		t.Fatalf("NewSession on a dead chrome: %v", err)
	}
	if _, err := e.b.Memory(ctx); err == nil {
		t.Fatal("Memory of a dead chrome succeeded")
	}
	// Kill cleans up what the crash left: children in the group, profile.
	if err := e.b.Kill(); err != nil {
		t.Fatal(err)
	}
	if left := processesUnder(t, e.root); len(left) > 0 {
		t.Fatalf("chrome processes left:\n%s", strings.Join(left, "\n"))
	}
	if _, err := os.Stat(e.b.ProfileDir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("profile dir left: %v", err)
	}
}

// TestChromeDiesWhileLoading kills Chrome after the page committed, while
// the render waits for the load event that a dead Chrome never sends (an
// image of the page never arrives): the render ends as crashed when Chrome
// dies, not at its timeout.
func TestChromeDiesWhileLoading(t *testing.T) {
	e := newEnv(t)
	s := e.session(t)
	ctx := context.Background()
	imageRequested := make(chan struct{}, 16)
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/page":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, `<!doctype html><html><head><title>Loading</title></head><body><div id="partial">partial</div><img src="/image">`)
		case "/image":
			imageRequested <- struct{}{}
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })

	const timeout = time.Minute
	done := renderAsync(s, Request{URL: srv.URL + "/page", Timeout: timeout})
	select {
	case <-imageRequested:
	case o := <-done:
		t.Fatalf("render ended before the page asked for its image: %v", o.err)
	}
	// The document is parsed, so it committed; one round trip on the CDP
	// pipe lets Page.navigate's answer, sent at the commit, reach the
	// render first, which then waits for the load event. (Should the kill
	// still find it in Page.navigate, it ends as TestChromeDies's does:
	// the test passes either way with the fix, and fails without it
	// whenever the render got that far.)
	if err := e.b.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(e.b.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	o := <-done // bounded by the render's own timeout
	wantClass(t, o.err, ClassCrashed, true)
	if o.took >= timeout {
		t.Fatalf("render ended at its timeout (%v), not when chrome died", o.took)
	}
}

// renderOutcome is how a render run by renderAsync ended.
type renderOutcome struct {
	err  error
	took time.Duration
}

// renderAsync runs req on s in the background.
func renderAsync(s *Session, req Request) <-chan renderOutcome {
	done := make(chan renderOutcome, 1)
	go func() {
		start := time.Now()
		_, err := s.Render(context.Background(), req)
		done <- renderOutcome{err, time.Since(start)}
	}()
	return done
}

// TestSessionsReopen opens, uses and closes sessions many times on one
// Chrome: no tab, browser context or goroutine may pile up.
func TestSessionsReopen(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	counts := func() (pages, contexts int) {
		res, err := cdp.Call(ctx, e.b.cdpB, target.GetTargets, target.GetTargetsParams{})
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range res.TargetInfos {
			if info.Type == "page" {
				pages++
			}
		}
		bc, err := cdp.Call(ctx, e.b.cdpB, target.GetBrowserContexts, cdp.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		return pages, len(bc.BrowserContextIDs)
	}
	cycle := func() {
		s, err := e.b.NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, iso := range []Isolation{"", IsolationShared, IsolationContext, IsolationWipe} {
			if _, err := s.Render(ctx, Request{URL: e.url("/page/2"), Isolation: iso, Wait: Wait{Selector: "#ready"}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	basePages, baseContexts := counts()
	cycle()
	settleGoroutines(t, goruntime.NumGoroutine())
	baseGoroutines := goruntime.NumGoroutine()
	for range 6 {
		cycle()
	}
	// Chrome answers Target.closeTarget before the target is gone from its
	// list, so poll.
	deadline := time.Now().Add(20 * time.Second)
	for {
		pages, contexts := counts()
		if pages == basePages && contexts == baseContexts {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 7 sessions: %d pages and %d browser contexts, want %d and %d", pages, contexts, basePages, baseContexts)
		}
		time.Sleep(50 * time.Millisecond)
	}
	settleGoroutines(t, baseGoroutines)
}

func TestLaunchErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	silent := filepath.Join(dir, "silent-chrome")
	// A "browser" that starts, forks a child into its group and never
	// answers on the pipe.
	if err := os.WriteFile(silent, []byte("#!/bin/sh\nsleep 600 &\nwhile :; do sleep 1; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		exec    string
		timeout time.Duration
		want    string
	}{
		{"missing", filepath.Join(dir, "no-such-chrome"), time.Second, "starting"},
		{"exits", "/bin/false", 30 * time.Second, "exited during start"},
		{"silent", silent, time.Second, "did not answer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := shortTempDir(t)
			start := time.Now()
			b, err := Launch(ctx, Options{ExecPath: tc.exec, ProfileRoot: root, StartTimeout: tc.timeout})
			if err == nil {
				b.Kill()
				t.Fatal("launch succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to say %q", err, tc.want)
			}
			wantDuration(t, time.Since(start), 0, tc.timeout+slack)
			entries, _ := os.ReadDir(root)
			if len(entries) != 0 {
				t.Fatalf("profile root holds %d entries after a failed launch", len(entries))
			}
			if left := processesUnder(t, root); len(left) > 0 {
				t.Fatalf("processes left:\n%s", strings.Join(left, "\n"))
			}
		})
	}
}

func TestMemoryAndVersion(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	idle, err := e.b.Memory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Idle, the tree is the browser process and the zygote renderers fork
	// from (the tests' Chrome runs without its sandbox: unsandboxedFlags).
	if idle.Processes < 2 || idle.PSSBytes == 0 || idle.PSSBytes > idle.RSSBytes {
		t.Fatalf("idle memory %+v", idle)
	}
	if !strings.HasPrefix(e.b.Version(), "Chrome/") && !strings.HasPrefix(e.b.Version(), "HeadlessChrome/") {
		t.Fatalf("version %q", e.b.Version())
	}
	// A page that keeps memory alive shows in the tree while its tab lives.
	// With a 64 MB page, one CI run (go test -race, the whole suite beside
	// it) saw only 26 MB more, under the 32 MB asked; the cause was not
	// found (half of what /leak retains is typed arrays never written,
	// which need not be resident). A 128 MB page shows about 180 MB more
	// on a quiet machine.
	s := e.session(t)
	if _, err := s.Render(ctx, Request{URL: e.url("/leak/1?mb=128"), Isolation: IsolationShared, Wait: Wait{Selector: "#ready"}}); err != nil {
		t.Fatal(err)
	}
	busy, err := e.b.Memory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("PSS %d MB idle, %d MB with the page", idle.PSSBytes>>20, busy.PSSBytes>>20)
	if busy.PSSBytes < idle.PSSBytes+32<<20 {
		t.Fatalf("PSS %d MB with a 128 MB page, %d MB idle", busy.PSSBytes>>20, idle.PSSBytes>>20)
	}
}

// TestHelpersInProcessWithoutSandbox: without Chrome's sandbox the GPU
// process and the network service are threads of the browser process
// (unsandboxedFlags), on either binary; after a page has loaded, Chrome's
// tree holds no process of either type, and one zygote: the one renderers
// fork from, not the unsandboxed helpers' one.
func TestHelpersInProcessWithoutSandbox(t *testing.T) {
	site := testutil.StartSite(t, testsite.Options{})
	b := launch(t, Options{NoSandbox: true})
	s := openSession(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Render(ctx, Request{URL: site.URL + "/page/1", Wait: Wait{Selector: "#ready"}}); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, pid := range processTree(int32(b.PID())) {
		for _, arg := range procArgs(int(pid)) {
			if v, ok := strings.CutPrefix(arg, "--type="); ok {
				types = append(types, v)
			}
			if v, ok := strings.CutPrefix(arg, "--utility-sub-type="); ok {
				types = append(types, v)
			}
		}
	}
	zygotes := 0
	for _, ty := range types {
		if ty == "zygote" {
			zygotes++
		}
	}
	if zygotes != 1 {
		// The second is the unsandboxed helpers' (--no-zygote-sandbox).
		t.Errorf("process types %q: %d zygotes, want 1", types, zygotes)
	}
	if !slices.Contains(types, "renderer") {
		t.Fatalf("process types %q: no renderer; the scan is not seeing Chrome's tree", types)
	}
	for _, ty := range types {
		if ty == "gpu-process" || strings.Contains(ty, "NetworkService") {
			t.Errorf("Chrome without its sandbox runs a %s process (types %q); want it in the browser process", ty, types)
		}
	}
}

// TestChromeEnvironment: Chrome's environment is what Options.Env gives
// it, plus the profile's XDG homes and TMPDIR, and nothing of this
// process's: a variable set here (as a consumer's database URL is) is not
// in it; with Env nil, it is what Environ keeps of this process's. Its
// helpers inherit it (the page sees Options.Env's time zone), but overwrite
// the memory /proc shows as their environ with their command lines, so the
// browser process is the one read.
func TestChromeEnvironment(t *testing.T) {
	t.Setenv("FARM_TEST_SECRET", "postgres://farm:hunter2@db/farm")
	t.Setenv("TZ", "America/New_York")
	site := testutil.StartSite(t, testsite.Options{})
	names := func(environ []string) []string {
		var out []string
		for _, kv := range environ {
			name, _, _ := strings.Cut(kv, "=")
			out = append(out, name)
		}
		slices.Sort(out)
		return slices.Compact(out) // exec keeps one value of a name
	}
	for _, tc := range []struct {
		name   string
		env    []string
		offset string // of new Date(0) from UTC, in the page, in minutes
	}{
		{"given", []string{"TZ=Asia/Kolkata", "LANG=C.UTF-8"}, "-330"},
		{"default", nil, "300"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := launch(t, Options{Env: tc.env})
			s := openSession(t, b)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := s.Render(ctx, Request{URL: site.URL + "/page/1", Wait: Wait{Selector: "#ready"},
				Extract: "new Date(0).getTimezoneOffset()"})
			if err != nil {
				t.Fatal(err)
			}
			if string(res.Data) != tc.offset {
				t.Errorf("time zone offset %s in the page, want %s", res.Data, tc.offset)
			}
			data, err := os.ReadFile("/proc/" + strconv.Itoa(b.PID()) + "/environ")
			if err != nil {
				t.Fatal(err)
			}
			got := names(strings.Split(strings.TrimRight(string(data), "\x00"), "\x00"))
			env := tc.env
			if env == nil {
				env = Environ(os.Environ())
			}
			want := names(append(slices.Clone(env), "TMPDIR=", "XDG_CACHE_HOME=", "XDG_CONFIG_HOME="))
			if !slices.Equal(got, want) || slices.Contains(got, "FARM_TEST_SECRET") || !slices.Contains(got, "TZ") {
				t.Errorf("Chrome's environment has %q, want %q", got, want)
			}
		})
	}
}
