package web

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// findChrome returns the Chrome binary: $FARM_CHROME, Debian's real binary
// (without the wrapper script's extra shell), or one on $PATH.
func findChrome(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FARM_CHROME"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/lib/chromium/chromium"); err == nil {
		return "/usr/lib/chromium/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chrome or Chromium found (scripts/test.sh installs Debian's chromium); set FARM_CHROME")
	return ""
}

// artifactDir is where the browser test saves its screenshots.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("FARM_TEST_ARTIFACTS"); d != "" {
		d = filepath.Join(d, "web")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// pagePNG is a job screenshot for the detail view: a landscape of stripes.
func pagePNG(t *testing.T) []byte {
	img := image.NewRGBA(image.Rect(0, 0, 480, 300))
	for x := range 480 {
		for y := range 300 {
			c := color.RGBA{240, 244, 250, 255}
			switch {
			case y < 40:
				c = color.RGBA{29, 35, 48, 255}
			case (x/60+y/60)%2 == 0:
				c = color.RGBA{uint8(37 + x/8), 99, 235, 255}
			}
			img.Set(x, y, c)
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// consoleError describes an error event of the page, or returns "".
func consoleError(ev any) string {
	switch e := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		return fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, msg)
	case *runtime.EventConsoleAPICalled:
		if e.Type != runtime.ConsoleAPICalledTypeError {
			return ""
		}
		var parts []string
		for _, a := range e.Args {
			parts = append(parts, string(a.Value)+a.Description)
		}
		return "console.error: " + strings.Join(parts, " ")
	case *cdplog.EventEntryAdded:
		if e.Entry.Level != cdplog.EntryLevelError {
			return ""
		}
		return fmt.Sprintf("log (%s): %s %s", e.Entry.Source, e.Entry.Text, e.Entry.URL)
	}
	return ""
}

// chromeLeftovers lists the processes whose command line mentions dir:
// Chrome's own processes (--user-data-dir) and its crash handler (whose
// database is under the XDG config dir the test puts in dir).
func chromeLeftovers(dir string) []int {
	want := []byte(dir)
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if pid != os.Getpid() && bytes.Contains(cmd, want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// history writes 20 minutes of farm life ending now, sampled every 10 s
// through a queue whose clock the loop sets: two nodes each finishing a
// job per sample, their Chrome PSS climbing with every job and dropping at
// each recycle (every 20 jobs), and some failures.
func history(t *testing.T, f *fixture, nodes []string) (failedID int64) {
	t.Helper()
	ctx := context.Background()
	var at time.Time
	q := jobqueue.New(f.pool, jobqueue.Config{Now: func() time.Time { return at }})
	const steps = 120
	start := time.Now().Add(-steps * 10 * time.Second)
	at = start
	for _, n := range nodes {
		if _, _, err := q.Register(ctx, jobqueue.NodeInfo{ID: n, Hostname: "host-" + n, Capacity: 6, Version: "v-test",
			ChromeRecycleJobs: 20, ExitAfterJobs: 80}); err != nil {
			t.Fatal(err)
		}
	}
	for step := range steps {
		at = start.Add(time.Duration(step) * 10 * time.Second)
		for i, n := range nodes {
			jobs := step + 7*i // node 2 is 7 jobs ahead in its cycle
			since := int64(jobs % 20)
			pss := (220 + since*38 + int64((step*17+i*5)%25)) << 20
			// The range since the previous sample: from the previous
			// value up, or, across a recycle, from the fresh Chrome's
			// trough up to the old one's peak just before its kill.
			lo, hi := pss-38<<20, pss
			if since == 0 {
				lo, hi = 180<<20, (220+19*38+30)<<20
			}
			load := jobqueue.NodeLoad{
				CPUPercent: float64(30 + (step*7+i*13)%50), MemUsedBytes: int64(3+i) << 30, MemTotalBytes: 8 << 30,
				ChromePSSBytes: pss, ChromePSSMinBytes: lo, ChromePSSMaxBytes: hi, BusySessions: 1 + (step+i)%6,
				JobsSinceChromeStart: since, JobsSinceProcessStart: int64(jobs % 80), ChromeRestarts: int64(jobs%80) / 20,
			}
			if _, err := q.Incarnation(jobqueue.Node{ID: n}).Heartbeat(ctx, load); err != nil {
				t.Fatal(err)
			}
			// This step's job outranks the backlog, so it is the one the
			// node takes first; in the second half the nodes also drain
			// the backlog, two jobs each per step.
			_, ids, err := q.Enqueue(ctx, []jobqueue.Spec{{URL: fmt.Sprintf("http://shop.test/item/%d/%d", i, step), MaxAttempts: 1, Priority: 10}})
			if err != nil {
				t.Fatal(err)
			}
			take := 1
			if step >= steps/2 {
				take = 3
			}
			if _, err := q.Assign(ctx, n, take); err != nil {
				t.Fatal(err)
			}
			claimed, err := q.Claim(ctx, n, take)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range claimed {
				switch {
				case j.ID == ids[0] && i == 1 && step%9 == 0:
					_, err = q.Incarnation(jobqueue.Node{ID: n}).Fail(ctx, j.ID, "navigation timeout after 30s waiting for #price", "timeout", false)
					failedID = j.ID
				case j.ID == ids[0] && i == 0 && step%23 == 0:
					_, err = q.Incarnation(jobqueue.Node{ID: n}).Fail(ctx, j.ID, "HTTP 503 Service Unavailable", "http_5xx", false)
				default:
					err = completeJob(ctx, q, j.ID, n, jobqueue.Result{FinalURL: j.Spec.URL, Status: 200, Title: "Item"})
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		if step < steps/2 {
			backlog := make([]jobqueue.Spec, 3)
			for k := range backlog {
				backlog[k] = jobqueue.Spec{URL: fmt.Sprintf("http://shop.test/list/%d/%d", step, k)}
			}
			if _, _, err := q.Enqueue(ctx, backlog); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := q.RecordSamples(ctx, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return failedID
}
