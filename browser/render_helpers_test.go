package browser

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
)

// closedPort returns a URL on a loopback port where nothing listens.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/"
}

// waitTabGone polls until no tab shows a URL ending in path: the tab of a
// job that timed out is torn down, hung renderer and all.
func waitTabGone(t *testing.T, e *env, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		res, err := cdp.Call(ctx, e.b.cdpB, target.GetTargets, target.GetTargetsParams{})
		if err != nil {
			t.Fatalf("listing targets: %v", err)
		}
		left := slices.ContainsFunc(res.TargetInfos, func(info *target.Info) bool {
			return info.Type == "page" && strings.HasSuffix(info.URL, path)
		})
		if !left {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the tab of %s is still open", path)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitNoPopups polls until no page that a page opened is left.
func waitNoPopups(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		res, err := cdp.Call(ctx, e.b.cdpB, target.GetTargets, target.GetTargetsParams{})
		if err != nil {
			t.Fatalf("listing targets: %v", err)
		}
		var popups []string
		for _, info := range res.TargetInfos {
			if info.Type == "page" && info.OpenerID != "" {
				popups = append(popups, info.URL)
			}
		}
		if len(popups) == 0 {
			if e.b.janitor.popupsClosed() == 0 {
				t.Fatal("no popup was ever closed: the page opened none")
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("popups still open: %q", popups)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pdfClass is how the test's browser fails a job that awaits a selector on a
// PDF.
func pdfClass(t *testing.T) string {
	if testKind(t) == KindChrome {
		return ClassNotHTML
	}
	return ClassDownload
}
