package browser

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testutil"
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
	testutil.Eventually(t, 20*time.Second, "the tab of "+path+" to close", func() bool {
		return !slices.ContainsFunc(pageTargets(t, e), func(info *target.Info) bool {
			return strings.HasSuffix(info.URL, path)
		})
	})
}

// waitNoPopups polls until no page that a page opened is left.
func waitNoPopups(t *testing.T, e *env) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, "the popups to close", func() bool {
		return !slices.ContainsFunc(pageTargets(t, e), func(info *target.Info) bool { return info.OpenerID != "" })
	})
	if e.b.janitor.popupsClosed() == 0 {
		t.Fatal("no popup was ever closed: the page opened none")
	}
}

// pageTargets lists the browser's page targets.
func pageTargets(t *testing.T, e *env) []*target.Info {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cdp.Call(ctx, e.b.cdpB, target.GetTargets, target.GetTargetsParams{})
	if err != nil {
		t.Fatalf("listing targets: %v", err)
	}
	return slices.DeleteFunc(res.TargetInfos, func(info *target.Info) bool { return info.Type != "page" })
}

// pdfClass is how the test's browser fails a job that awaits a selector on a
// PDF.
func pdfClass(t *testing.T) string {
	if testKind(t) == KindChrome {
		return ClassNotHTML
	}
	return ClassDownload
}
