package browser

// The command line Chrome starts with.

import (
	"fmt"
	"os"
	"strings"
)

// baseFlags are the flags every deployment needs: headless, quiet on the
// network (no background requests, no component or sync traffic, no QUIC),
// shared memory in the temp dir (Docker's /dev/shm is 64 MB), and nothing
// that throttles a tab that is not in front.
var baseFlags = []string{
	"--headless",
	"--disable-gpu",
	"--disable-dev-shm-usage",
	"--disable-background-networking",
	"--disable-component-update",
	"--disable-sync",
	"--disable-quic",
	"--no-first-run",
	"--no-default-browser-check",
	"--disable-default-apps",
	"--disable-extensions",
	"--disable-breakpad",
	"--disable-crash-reporter",
	"--disable-client-side-phishing-detection",
	"--disable-domain-reliability",
	"--disable-background-timer-throttling",
	"--disable-backgrounding-occluded-windows",
	"--disable-renderer-backgrounding",
	"--disable-hang-monitor",
	// No --disable-ipc-flooding-protection (Puppeteer's default): without
	// the protection a page calling history.replaceState in a loop held
	// the browser process, every session with it
	// (TestHistoryFloodStopsNoOtherSession).
	"--disable-prompt-on-repost",
	// The omnibox popups are WebUI renderers that new headless prewarms in
	// every window (150 MB of RSS per Chrome for a UI nobody sees); a
	// spare renderer is started for navigations a fresh context never
	// makes; BackForwardCache would keep a reused tab's previous page
	// alive; sandboxed-iframe isolation, process-per-site and paint holding
	// are off as in Puppeteer. Measured here: a job in a fresh context took
	// 440 ms of Chrome CPU without this list, 200-240 ms with it.
	// RenderDocument (a new frame host per document) and proactive
	// BrowsingInstance swaps (for the back-forward cache, off anyway) make
	// every navigation of a reused tab build its frame anew: off, a /status/
	// job on a wiped tab took 55 instead of 96 ms of Chrome CPU, on the
	// shared tab 25 instead of 41. FetchLaterAPI: a fetchLater request is
	// sent by the browser when its page is left, past the wipe's request
	// block and reported to CDP only then, and its answer could set a
	// cookie in the wiped context for the next job.
	"--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication,CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions,DialMediaRouteProvider,WebUIOmniboxPopup,WebUIOmniboxAimPopup," +
		"BackForwardCache,SpareRendererForSitePerProcess,IsolateSandboxedIframes,ProcessPerSiteUpToMainFrameThreshold,PaintHolding,AcceptCHFrame," +
		"RenderDocument,ProactivelySwapBrowsingInstance,FetchLaterAPI",
	"--disable-component-extensions-with-background-pages",
	// Site isolation puts every site in a renderer process of its own. A
	// scraping job's frames all belong to that job, and isolation between
	// jobs is by browser context (IsolationContext never shares a renderer
	// with another context); what site isolation costs here is a renderer
	// start per navigation from the wiped tab's about:blank to the next
	// job's site, and a process per cross-site iframe.
	"--disable-site-isolation-trials",
	"--metrics-recording-only",
	"--password-store=basic",
	"--use-mock-keychain",
	"--mute-audio",
	"--hide-scrollbars",
	"--force-color-profile=srgb",
	fmt.Sprintf("--window-size=%d,%d", windowWidth, windowHeight),
}

// unsandboxedFlags run the GPU process (software compositing under
// --disable-gpu) and the network service as threads of the browser process
// instead of processes of their own, when Chrome runs without its sandbox:
// then those processes confine nothing the browser process could not reach,
// and each costs a process start and its own memory at every recycle (the
// README's recycling figures). The price is a crash of either taking the
// whole Chrome down (the supervisor's dead-Chrome path) instead of being
// restarted by Chrome. With the sandbox on they stay separate, sandboxed
// processes. With both inside the browser, the second zygote Chrome starts
// at boot, the one that forks unsandboxed helper processes, has none left to
// fork (a helper Chrome still needs, such as a utility process, is then
// started directly): not starting it saved 10-20 ms of each boot's 62-70
// (BenchmarkChromeLife, 4 alternated pairs).
var unsandboxedFlags = []string{
	"--in-process-gpu",
	"--enable-features=NetworkServiceInProcess2",
	"--no-unsandboxed-zygote",
}

// mergeFeatureFlags joins repeated --enable-features= and --disable-features=
// flags into one each, at the place of the first: Chrome honours only the
// last of a repeated flag, so an extra flag would silently drop the base
// list (the omnibox popups alone cost 200 ms of CPU per fresh context).
func mergeFeatureFlags(args []string) []string {
	out := make([]string, 0, len(args))
	at := map[string]int{}
	for _, a := range args {
		name, list, ok := strings.Cut(a, "=")
		if ok && (name == "--enable-features" || name == "--disable-features") {
			if i, seen := at[name]; seen {
				if list != "" {
					out[i] += "," + list
				}
				continue
			}
			at[name] = len(out)
		}
		out = append(out, a)
	}
	return out
}

// args builds Chrome's command line.
func (b *Browser) args() []string {
	args := append([]string(nil), baseFlags...)
	if b.opts.NoSandbox || os.Geteuid() == 0 {
		args = append(args, "--no-sandbox")
		args = append(args, unsandboxedFlags...)
	}
	if b.opts.EgressProxy != "" {
		args = append(args,
			"--proxy-server="+b.opts.EgressProxy,
			"--proxy-bypass-list=<-loopback>",
			// WebRTC sends no UDP past the proxy: the headless shell reads
			// the first switch, full Chrome the second (TestEgressProxyLaunch
			// sees a STUN packet on either without its own).
			"--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
			"--webrtc-ip-handling-policy=disable_non_proxied_udp",
		)
	}
	args = mergeFeatureFlags(append(args, b.opts.ExtraFlags...))
	args = append(args,
		"--user-data-dir="+b.profileDir,
		// No URL: the headless shell then opens no tab at all, where
		// about:blank cost a renderer process per Chrome that no job uses
		// (20-30 ms of CPU at every recycle).
		"--remote-debugging-pipe",
	)
	return args
}
