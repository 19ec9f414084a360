//go:build imagecheck

package imagecheck

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/browserfarm/browserfarm/internal/pglocal"
	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// What scripts/image-check.sh passes in.
const (
	rootfsEnv   = "FARM_IMAGE_ROOTFS"   // the image's exported filesystem (proc, dev mounted)
	imageEnvEnv = "FARM_IMAGE_ENV_FILE" // the image's Config.Env, one NAME=value per line
	userEnv     = "FARM_IMAGE_USER"     // uid:gid to run as
	entryEnv    = "FARM_IMAGE_ENTRYPOINT"
)

// TestImageRendersJob runs the image's entrypoint (farm init -- farm
// consumer, with the image's environment: respawn mode, headless shell) from
// its filesystem under chroot as the image's user, submits jobs of the test
// site, waits for them to complete, then stops the container's main process
// with SIGTERM and wants exit 0. The consumer exits for a fresh process
// every exitAfter jobs, so the jobs cross process recycles, each successor
// booted ahead and standing by (the handoff the image's respawn mode gives).
// Meanwhile no farm process's environment, the container's main process's
// included, is readable by the image's user, which Chrome runs as.
func TestImageRendersJob(t *testing.T) {
	rootfs := os.Getenv(rootfsEnv)
	if rootfs == "" {
		t.Skip(rootfsEnv + " not set: run scripts/image-check.sh")
	}
	imageEnv := readLines(t, os.Getenv(imageEnvEnv))
	entry := strings.Fields(os.Getenv(entryEnv))
	if len(entry) == 0 {
		t.Fatal(entryEnv + " is empty")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	dbURL, pool := startDB(ctx, t)
	if err := jobqueue.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	q := jobqueue.New(pool, jobqueue.Config{})
	site := testutil.StartSite(t, testsite.Options{Items: 12})
	// 5 jobs, a fresh process every 2: two recycles with a successor
	// standing by, and a third process that ends on SIGTERM.
	const jobs, exitAfter, recycles = 5, 2, 2
	specs := []jobqueue.Spec{{
		URL:        site.URL + "/page/7",
		Wait:       &jobqueue.Wait{Selector: "#ready"},
		Extract:    `({title: document.querySelector('h1').textContent, items: document.querySelectorAll('li.item').length})`,
		Screenshot: true,
	}}
	for i := 1; i < jobs; i++ {
		specs = append(specs, jobqueue.Spec{URL: fmt.Sprintf("%s/page/%d", site.URL, i), Wait: &jobqueue.Wait{Selector: "#ready"}})
	}
	_, ids, err := q.Enqueue(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}

	const node = "image-check"
	args := append([]string{"--userspec=" + os.Getenv(userEnv), rootfs}, entry...)
	args = append(args, "consumer")
	cmd := exec.Command("chroot", args...)
	cmd.Env = append(imageEnv, "HOME=/home/farm", "FARM_NODE_ID="+node, "FARM_LOG_FORMAT=json",
		fmt.Sprintf("FARM_EXIT_AFTER_JOBS=%d", exitAfter),
		"FARM_ALLOW_DESTINATION="+strings.TrimPrefix(site.URL, "http://"),
		"FARM_DATABASE_URL="+dbURL)
	logPath := filepath.Join(t.TempDir(), "consumer.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	logs := func() string { b, _ := os.ReadFile(logPath); return string(b) }

	// Assigning is the producer's work; here it is done by hand, one job at
	// a time, so that every process gets jobs until its exit.
	for _, id := range ids {
		for {
			_, _ = q.Assign(ctx, node, 1)
			j, err := q.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if j.State == jobqueue.StateCompleted {
				break
			}
			if j.State.Finished() {
				t.Fatalf("job %d %s: %s\n%s", id, j.State, j.LastError, logs())
			}
			select {
			case err := <-exited:
				t.Fatalf("the image's process exited (%v) before job %d completed\n%s", err, id, logs())
			case <-ctx.Done():
				t.Fatalf("job %d not completed in time (%s)\n%s", id, j.State, logs())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	checkHandoffs(t, logs(), recycles)
	t.Logf("%d jobs across %d process recycles, each successor standing by", jobs, recycles)
	res, err := q.GetResult(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	var data struct {
		Title string `json:"title"`
		Items int    `json:"items"`
	}
	if err := json.Unmarshal(res.Data, &data); err != nil || data.Items != 12 || res.Title != "Page 7" {
		t.Errorf("title %q, data %s (%v); want Page 7 and 12 items", res.Title, res.Data, err)
	}
	if res.Status != 200 || len(res.Screenshot) == 0 {
		t.Errorf("status %d, %d screenshot bytes; want 200 and a screenshot", res.Status, len(res.Screenshot))
	}
	t.Logf("rendered in the image: %s -> status %d, title %q, data %s, %d-byte screenshot, total %d ms",
		res.FinalURL, res.Status, res.Title, res.Data, len(res.Screenshot), res.Timings.TotalMS)
	// The browser the image's consumer chose by itself: the headless shell.
	shell := filepath.Join(rootfs, "usr/lib/chromium/chromium-headless-shell")
	if exes := browserExes(rootfs); len(exes) == 0 || exes[0] != shell {
		t.Errorf("browser processes of the image run %v, want %s", exes, shell)
	} else {
		t.Logf("browser: %s", strings.TrimPrefix(exes[0], rootfs))
	}

	checkEnvironsHidden(t, rootfs, os.Getenv(userEnv), cmd.Process.Pid)

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("after SIGTERM the image's process exited with %v, want 0\n%s", err, logs())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("no exit after SIGTERM\n%s", logs())
	}
	n, err := q.GetNode(ctx, node)
	if err != nil || n.State != jobqueue.NodeExited {
		t.Errorf("node after SIGTERM: %+v, %v; want exited", n, err)
	}
}

// checkHandoffs wants the respawn parent's log to show n process recycles,
// each with its successor booted ahead and standing by.
func checkHandoffs(t *testing.T, logs string, n int) {
	t.Helper()
	var handoffs, recycled int
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "child recycled; restarting") {
			recycled++
			if strings.Contains(l, `"successor_standing_by":true`) {
				handoffs++
			}
		}
	}
	if recycled != n || handoffs != n {
		t.Errorf("%d process recycles, %d with a successor standing by; want %d of each\n%s", recycled, handoffs, n, logs)
	}
}

// startDB starts a PostgreSQL on 127.0.0.1 for the image's processes, stopped
// when the test ends, and returns its URL and a pool on it.
func startDB(ctx context.Context, t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	port := freePort(t)
	dataDir := t.TempDir()
	// The server runs as its own user, which must reach the data dir.
	_ = os.Chmod(dataDir, 0o755)
	_ = os.Chmod(filepath.Dir(dataDir), 0o755)
	cluster, err := pglocal.Start(ctx, pglocal.Config{DataDir: filepath.Join(dataDir, "pg"), Port: port, Ephemeral: true,
		Settings: map[string]string{"listen_addresses": "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Stop(context.Background()) })
	dbURL := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return dbURL, pool
}

// checkEnvironsHidden wants the environment of every farm process running
// from rootfs, the container's main process (main, chroot having exec'd) among
// them, unreadable by user, and some browser process's readable (so that the
// read itself works).
func checkEnvironsHidden(t *testing.T, rootfs, user string, main int) {
	t.Helper()
	farm := filepath.Join(rootfs, "usr/local/bin/farm")
	if fi, err := os.Stat(farm); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o711 {
		t.Errorf("%s: mode %v, want 0711, so that every farm process is non-dumpable from its exec on", farm, fi.Mode())
	}
	readable := func(pid int) bool {
		return exec.Command("chroot", "--userspec="+user, rootfs, "cat", fmt.Sprintf("/proc/%d/environ", pid)).Run() == nil
	}
	var farms, browsers []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		switch exe, _ := os.Readlink(filepath.Join("/proc", d.Name(), "exe")); {
		case exe == farm:
			farms = append(farms, pid)
		case strings.HasPrefix(exe, filepath.Join(rootfs, "usr/lib/chromium")+"/"):
			browsers = append(browsers, pid)
		}
	}
	if !slices.Contains(farms, main) {
		t.Errorf("the container's main process %d does not run %s (farm processes: %v)", main, farm, farms)
	}
	if !slices.ContainsFunc(browsers, readable) {
		t.Fatalf("no browser process whose environment %s can read (%v): the check cannot tell", user, browsers)
	}
	for _, pid := range farms {
		if readable(pid) {
			t.Errorf("%s reads the environment of farm process %d", user, pid)
		}
	}
	t.Logf("the environments of %d farm processes (main %d) hidden from %s; a browser process's readable", len(farms), main, user)
}

// browserExes lists the distinct executables under rootfs/usr/lib/chromium
// that running processes were started from.
func browserExes(rootfs string) []string {
	seen := map[string]bool{}
	var out []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		exe, err := os.Readlink(filepath.Join("/proc", d.Name(), "exe"))
		if err != nil || !strings.HasPrefix(exe, filepath.Join(rootfs, "usr/lib/chromium")+"/") || seen[exe] {
			continue
		}
		seen[exe] = true
		out = append(out, exe)
	}
	return out
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", imageEnvEnv, err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
