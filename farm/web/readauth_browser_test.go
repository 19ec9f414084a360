package web

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/jobqueue"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// TestDashboardWithReadToken: behind a read token the dashboard asks for the
// token once, keeps it for the tab and shows the farm.
func TestDashboardWithReadToken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chrome")
	}
	t.Parallel()
	chrome := findChrome(t)
	const readToken = "dash-read-token"
	f := newFixture(t, func(c *Config) { c.ReadAuth, c.ReadToken = true, readToken })
	f.register("token-node", 6)
	shotID := f.runOne("token-node", "http://shop.test/item/7", jobqueue.Result{FinalURL: "http://shop.test/item/7", Status: 200,
		Title: "Item 7", Screenshot: pagePNG(t)}, "")

	profile, err := os.MkdirTemp("", "dash-token-")
	if err != nil {
		t.Fatal(err)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chrome), chromedp.Headless, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.DisableGPU, chromedp.UserDataDir(profile),
		chromedp.Env("XDG_CONFIG_HOME="+filepath.Join(profile, "xdg-config"), "XDG_CACHE_HOME="+filepath.Join(profile, "xdg-cache")),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("disable-extensions", true))
	defer func() {
		cancelAlloc()
		if left := chromeLeftovers(profile); len(left) > 0 {
			t.Errorf("Chrome processes %v outlived the allocator", left)
		}
		os.RemoveAll(profile)
	}()
	bctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	bctx, cancelTimeout := context.WithTimeout(bctx, 90*time.Second)
	defer cancelTimeout()

	var prompts atomic.Int64
	answered := make(chan error, 1)
	err = chromedp.Listen(bctx, func(ev any) {
		if d, ok := ev.(*page.EventJavascriptDialogOpening); ok && d.Type == page.DialogTypePrompt {
			if prompts.Add(1) > 1 {
				return
			}
			// Answered off the event loop, which must not block on a call.
			go func() {
				answered <- chromedp.Do(bctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
					_, err := cdp.Call(ctx, tg, page.HandleJavaScriptDialog,
						page.HandleJavaScriptDialogParams{Accept: true, PromptText: readToken})
					return err
				}))
			}()
		}
	})
	if err != nil {
		t.Fatalf("start Chrome: %v", err)
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(f.url+"/")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`(window.farmDashboard && window.farmDashboard.nodes || []).some(n => n.id === 'token-node')`,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("the dashboard never showed the node: %v (prompts %d)", err, prompts.Load())
	}
	if err := <-answered; err != nil {
		t.Fatalf("answering the prompt: %v", err)
	}
	// A job's screenshot is a read too: the image is fetched with the token.
	if err := chromedp.Do(bctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = "#job/%d"`, shotID))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`(() => {
		const img = document.querySelector('#job-body img.shot');
		return !!img && img.complete && img.naturalWidth === 480;
	})()`, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("the job's screenshot never showed behind the read token: %v", err)
	}
	if n := prompts.Load(); n != 1 {
		t.Errorf("the dashboard asked for the token %d times, want once", n)
	}
}
