// Package browser runs one headless Chrome process and renders jobs in it.
// It starts Chrome in a process group of its own with a fresh profile
// directory, talks to it over the DevTools pipe with chromedp, renders pages
// in sessions (one tab slot each, by default a fresh browser context per job,
// optionally behind a per-job proxy), survives hostile pages (dialogs,
// popups, downloads, endless loops, renderer crashes), reports the memory of
// the whole process tree as PSS, and kills and reaps the whole tree with its
// profile directory. It imports nothing else of the project.
package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/browserfarm/browserfarm/browser/egress"
)

// Options configures Launch. The zero value launches the headless shell if
// it is installed (else full Chrome), with a profile directory under
// os.TempDir().
type Options struct {
	// ExecPath is the browser binary. "" means the first binary of Kind
	// found by FindExec.
	ExecPath string
	// Kind is the browser to look for when ExecPath is "": KindShell,
	// KindChrome, or "" for the shell if installed, else full Chrome.
	Kind Kind
	// NoSandbox forces --no-sandbox. It is added anyway when running as
	// root, where Chrome refuses to start with its sandbox.
	NoSandbox bool
	// ProfileRoot is the parent directory of the per-launch profile
	// directory. "" means os.TempDir().
	ProfileRoot string
	// ExtraFlags are appended to Chrome's command line, e.g.
	// "--js-flags=--max-old-space-size=512".
	ExtraFlags []string
	// Env is Chrome's environment (NAME=value), besides the XDG config and
	// cache homes and the TMPDIR that Launch points into the profile (its
	// own win over Env's: exec keeps a name's last value). nil means
	// Environ(os.Environ()): Chrome never inherits this process's whole
	// environment, whose secrets any page could read. Keep HOME and PATH
	// in it: with Launch's three variables alone, Chrome crashed in libc's
	// getenv at start in 3 of 4 runs of 450 launches here; with HOME, PATH
	// or a dummy fourth variable added, in none of 3 or 4 such runs each
	// (not proof that it cannot happen, and a failed boot is retried).
	Env []string
	// Logger receives the lifecycle logs. nil means zap.NewNop().
	Logger *zap.Logger
	// MaxMessageBytes bounds an answer from Chrome (a screenshot, an
	// extract's value, a page's HTML and links): one over it fails its
	// job (ClassTooLarge) instead of being read. 0 means
	// DefaultMaxMessageBytes; set it above the results the node's caps
	// allow. Events are bounded at 4 MiB, and dropped over it.
	MaxMessageBytes int
	// StartTimeout bounds the launch: process start to the first CDP answer.
	// 0 means 30 s.
	StartTimeout time.Duration
	// Background starts Chrome at a lower CPU priority (every process and
	// thread of its tree 10 nicer than this process) until Foreground is
	// called: a Chrome booting while another serves then slows no page in
	// flight. It is honoured only where this process may raise the
	// priority again (root, CAP_SYS_NICE, or RLIMIT_NICE); elsewhere Chrome
	// starts at normal priority.
	Background bool
	// EgressProxy, when set, is the node's filtering forward proxy
	// (http://127.0.0.1:PORT, see package egress): every request of every
	// page goes through it, loopback and link-local hosts included (Chrome
	// bypasses proxies for those by default), and WebRTC may use no UDP
	// that does not go through it. A job with a proxy of its own uses that
	// proxy instead.
	EgressProxy string
	// EgressFailure, with EgressProxy, says why the proxy last failed to
	// connect a host:port, if it did (egress.Proxy.Failure): Chrome reports
	// a refused or unresolvable https tunnel only as a failed one.
	EgressFailure func(hostport string) (egress.Failure, bool)
}

const (
	defaultStartTimeout = 30 * time.Second
	// defaultKillWait bounds how long Kill waits for the main process to
	// be reaped, and for the process group to vanish, after SIGKILL; the
	// kernel needs milliseconds unless a process is stuck in
	// uninterruptible sleep.
	defaultKillWait = 10 * time.Second
	// closeWait bounds the CDP calls that tear down tabs and contexts.
	closeWait = 5 * time.Second
	// windowWidth and windowHeight are the default viewport.
	windowWidth  = 1280
	windowHeight = 800
)

// Browser is one running Chrome process with its process group and profile
// directory. Its methods are safe for concurrent use.
type Browser struct {
	log        *zap.Logger
	opts       Options
	pid        int
	profileDir string
	extraTmp   string        // Chrome's temp dir when not inside profileDir
	output     *chromeOutput // Chrome's stdout and stderr

	// ctx is the life of the CDP connection; cancel ends it. rootCtx is the
	// chromedp context that holds the connected browser; tabs derive from it.
	ctx     context.Context
	cancel  context.CancelFunc
	rootCtx context.Context
	cdpB    *chromedp.Browser

	exited chan struct{} // closed when the main process has been reaped
	// gone is canceled when the process exited or CDP was lost: Done is
	// its channel, and a render's context ends with it
	// (context.AfterFunc in Render).
	gone     context.Context
	markGone context.CancelFunc

	bg sync.WaitGroup
	// reaper is the goroutine in cmd.Wait, apart from bg: a process stuck
	// in uninterruptible sleep holds it indefinitely, and Kill waits for
	// it only once exited is closed.
	reaper sync.WaitGroup
	// killWait bounds each of Kill's waits (defaultKillWait; tests
	// shorten it). exeDir is the directory of Chrome's executable, read
	// after the start: a process found only by its command line is
	// Chrome's if its executable is there.
	killWait time.Duration
	exeDir   string

	janitor   *janitor
	userAgent string // default user agent of every tab
	version   string // e.g. "Chrome/156.0.8078.79"

	prioMu sync.Mutex
	bgPlan *backgroundPlan // nil unless the tree runs in the background

	killOnce sync.Once
	killed   chan struct{} // closed when Kill has finished
	killErr  error
	// orphanedTicks is the CPU of the processes Kill orphaned (see
	// OrphanedCPUTicks).
	orphanedTicks atomic.Uint64
	// contexts counts what became of the wiped contexts (ContextStats).
	contexts contextCounter
	// pipe is the CDP connection; its counts of what it read and dropped
	// are for tests.
	pipe *pipeConn
}

// Launch starts Chrome and connects to it. Chrome runs in its own process
// group, so that Kill can end every process it forks; ctx bounds only the
// launch, not the life of the browser.
func Launch(ctx context.Context, opts Options) (*Browser, error) {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = defaultStartTimeout
	}
	execPath := opts.ExecPath
	if execPath == "" {
		var err error
		if execPath, err = FindExec(opts.Kind); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp(opts.ProfileRoot, dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("browser: creating the profile directory: %w", err)
	}
	if err := markOwner(dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}

	b := &Browser{
		log:        log,
		opts:       opts,
		profileDir: dir,
		exited:     make(chan struct{}),
		killed:     make(chan struct{}),
		killWait:   defaultKillWait,
	}
	b.gone, b.markGone = context.WithCancel(context.Background())
	if err := b.start(ctx, execPath); err != nil {
		// Kill cleans up whatever part of the start happened.
		b.Kill()
		return nil, err
	}
	b.holdInBackground()
	b.log = log.With(zap.Int("chrome_pid", b.pid))
	b.log.Info("chrome launched", zap.String("exec", execPath), zap.String("profile", dir))
	return b, nil
}

// maxTmpDirLen keeps Chrome's singleton socket path,
// $TMPDIR/org.chromium.Chromium.XXXXXX/SingletonSocket, under the 107 bytes
// a unix socket path may have: Chrome dies at start otherwise.
const maxTmpDirLen = 107 - len("/org.chromium.Chromium.XXXXXX/SingletonSocket")

// makeTmpDir makes Chrome's private temp dir: inside the profile when that
// path is short enough, else a separate one under os.TempDir() that Kill
// removes too.
func (b *Browser) makeTmpDir() (string, error) {
	dir := filepath.Join(b.profileDir, "tmp")
	if len(dir) <= maxTmpDirLen {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return "", fmt.Errorf("browser: creating chrome's temp dir: %w", err)
		}
		return dir, nil
	}
	dir, err := os.MkdirTemp("", dirPrefix+"tmp-")
	if err != nil {
		return "", fmt.Errorf("browser: creating chrome's temp dir: %w", err)
	}
	// RemoveAll: the owner mark is inside.
	if err := markOwner(dir); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	if len(dir) > maxTmpDirLen {
		os.RemoveAll(dir)
		return "", fmt.Errorf("browser: temp dir %s is too long for chrome's socket (max %d bytes): set TMPDIR shorter", dir, maxTmpDirLen)
	}
	b.extraTmp = dir
	return dir, nil
}

func (b *Browser) start(ctx context.Context, execPath string) error {
	// Chrome makes org.chromium.Chromium.* scratch dirs (its singleton
	// socket; shared memory with --disable-dev-shm-usage) in $TMPDIR and
	// leaves them behind when killed: a private TMPDIR goes with the
	// profile. Made first, so that its failure leaves no pipe open.
	tmpDir, err := b.makeTmpDir()
	if err != nil {
		return err
	}
	// The pipe transport: Chrome reads commands on fd 3 and writes on fd 4.
	childR, parentW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("browser: creating the command pipe: %w", err)
	}
	parentR, childW, err := os.Pipe()
	if err != nil {
		childR.Close()
		parentW.Close()
		return fmt.Errorf("browser: creating the event pipe: %w", err)
	}
	// Chrome's output goes through a pipe of our own into chrome.log, bounded
	// (chromeOutput); the child gets the pipe as an *os.File, so that exec
	// starts no copying goroutine that a child holding it could make Wait
	// wait for.
	closeAll := func(fs ...*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	logFile, err := os.Create(filepath.Join(b.profileDir, "chrome.log"))
	if err != nil {
		closeAll(childR, parentW, parentR, childW)
		return fmt.Errorf("browser: creating the chrome log: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(childR, parentW, parentR, childW, logFile)
		return fmt.Errorf("browser: creating the output pipe: %w", err)
	}
	b.output = newChromeOutput(outR, logFile)

	cmd := exec.Command(execPath, b.args()...)
	cmd.Dir = b.profileDir
	// Chrome's crash handler keeps its database under $XDG_CONFIG_HOME
	// (~/.config/chromium) and double-forks out of the process group;
	// pointing the XDG dirs into the profile keeps every file Chrome writes
	// there, and puts the profile path on the handler's command line, where
	// Kill finds it.
	env := b.opts.Env
	if env == nil {
		env = Environ(os.Environ())
	}
	cmd.Env = append(slices.Clone(env),
		"XDG_CONFIG_HOME="+filepath.Join(b.profileDir, "xdg-config"),
		"XDG_CACHE_HOME="+filepath.Join(b.profileDir, "xdg-cache"),
		"TMPDIR="+tmpDir,
	)
	cmd.Stdout = outW
	cmd.Stderr = outW
	cmd.ExtraFiles = []*os.File{childR, childW}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// If this process dies, the kernel kills Chrome. Pdeathsig follows
		// the thread that forked, so that thread stays locked until Wait.
		Pdeathsig: syscall.SIGKILL,
	}

	started := make(chan error, 1)
	b.reaper.Add(1)
	go func() {
		defer b.reaper.Done()
		runtime.LockOSThread()
		plan, background := b.startInBackground()
		err := cmd.Start()
		if !background || b.restoreThread(plan.base) {
			// A thread goes back to the runtime only at its own priority.
			defer runtime.UnlockOSThread()
		}
		if err != nil {
			started <- err
			close(b.exited)
			return
		}
		started <- nil
		// The exit status carries no information the caller can act on:
		// Done tells that Chrome is gone, Kill reaps it.
		_ = cmd.Wait()
		close(b.exited)
	}()
	err = <-started
	childR.Close()
	childW.Close()
	outW.Close()
	if err != nil {
		parentR.Close()
		parentW.Close()
		return fmt.Errorf("browser: starting %s: %w", execPath, err)
	}
	b.pid = cmd.Process.Pid

	b.ctx, b.cancel = context.WithCancel(context.Background())
	conn := newPipeConn(parentR, parentW, b.opts.MaxMessageBytes, b.log)
	b.pipe = conn
	cdpB, err := chromedp.NewBrowserTransport(b.ctx, conn,
		chromedp.WithBrowserLogf(b.chromedpLog(zap.DebugLevel)),
		chromedp.WithBrowserErrorf(b.chromedpLog(zap.DebugLevel)),
	)
	if err != nil {
		conn.Close()
		return fmt.Errorf("browser: connecting to chrome: %w", err)
	}
	b.cdpB = cdpB
	// Neither context is canceled on its own: b.cancel, their parent's,
	// ends both.
	allocCtx, _ := chromedp.NewAllocatorContext(b.ctx, attached{cdpB})
	b.rootCtx, _ = chromedp.NewContext(allocCtx)

	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		select {
		case <-b.exited:
		case <-cdpB.LostConnection:
		}
		b.markGone()
	}()

	sctx, cancel := context.WithTimeout(ctx, b.opts.StartTimeout)
	defer cancel()
	if err := b.handshake(sctx); err != nil {
		select {
		case <-cdpB.LostConnection:
			// The pipe closed: Chrome is exiting; let it finish so that its
			// output is complete.
			select {
			case <-b.exited:
			case <-time.After(2 * time.Second):
			}
		default:
		}
		select {
		case <-b.exited:
			return fmt.Errorf("browser: chrome exited during start: %w; output: %s", err, b.outputTail())
		default:
		}
		return fmt.Errorf("browser: chrome did not answer: %w; output: %s", err, b.outputTail())
	}
	// Chrome answered: the main process runs Chrome's binary now, not a
	// wrapper script that execs it.
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", b.pid)); err == nil {
		b.exeDir = filepath.Dir(exe)
	}
	return nil
}

// handshake waits for Chrome's first answer and sets up the browser-wide
// defaults: target discovery (to close popups) and no downloads.
func (b *Browser) handshake(ctx context.Context) error {
	v, err := cdp.Call(ctx, b.cdpB, browser.GetVersion, cdp.Empty{})
	if err != nil {
		return err
	}
	// Sites turn away "HeadlessChrome"; the default user agent of every tab
	// is Chrome's own without that word.
	b.userAgent = strings.Replace(v.UserAgent, "HeadlessChrome/", "Chrome/", 1)
	b.version = v.Product
	b.janitor = newJanitor(b)
	if err := chromedp.ListenBrowser(b.rootCtx, b.janitor.onEvent); err != nil {
		return err
	}
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		b.janitor.run(b.ctx)
	}()
	if _, err := cdp.Call(ctx, b.cdpB, target.SetDiscoverTargets, target.SetDiscoverTargetsParams{Discover: true}); err != nil {
		return err
	}
	return denyDownloads(ctx, b.cdpB, "")
}

func denyDownloads(ctx context.Context, s cdp.Session, id cdp.BrowserContextID) error {
	_, err := cdp.Call(ctx, s, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior:         browser.SetDownloadBehaviorBehaviorDeny,
		BrowserContextID: id,
	})
	return err
}

// attached is the chromedp allocator of a browser that is already connected:
// Launch starts the process itself to own its process group.
type attached struct{ b *chromedp.Browser }

func (a attached) Allocate(context.Context, ...chromedp.BrowserOption) (*chromedp.Browser, error) {
	return a.b, nil
}
func (a attached) Wait()          {}
func (a attached) Attaches() bool { return true }

func (b *Browser) chromedpLog(level zapcore.Level) func(string, ...any) {
	return func(format string, args ...any) {
		if ce := b.log.Check(level, "chromedp"); ce != nil {
			ce.Write(zap.String("msg", fmt.Sprintf(format, args...)))
		}
	}
}

// outputTail is the end of Chrome's output, for start errors.
func (b *Browser) outputTail() string {
	wait := time.Duration(0)
	select {
	case <-b.exited:
		// What it wrote before exiting is still in the pipe for a moment.
		wait = time.Second
	default:
	}
	return strings.TrimSpace(b.output.last(wait))
}

// PID is the process id of Chrome's main process, which is also the id of its
// process group.
func (b *Browser) PID() int { return b.pid }

// Version is Chrome's product and version, e.g. "Chrome/156.0.8078.79".
func (b *Browser) Version() string { return b.version }

// ProfileDir is the fresh profile directory of this Chrome; Kill removes it.
func (b *Browser) ProfileDir() string { return b.profileDir }

// Done is closed when the Chrome process exits or the CDP connection is lost,
// whether by a crash or by Kill.
func (b *Browser) Done() <-chan struct{} { return b.gone.Done() }
