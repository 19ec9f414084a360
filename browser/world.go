package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
)

// The farm's own scripts (waits, actions, the page's title, URL, HTML and
// links) run in an isolated world of the tab's main frame: they share the
// page's DOM but not its JavaScript globals and prototypes, which a page can
// replace (String.prototype.slice answering 64 MB makes a "cut" title 64 MB).
// Only the extract expression, which reads the page's own variables, runs in
// the page's world (see extract.go).

// farmWorldName names the isolated world; Chrome reports it as the
// execution context's name.
const farmWorldName = "browserfarm"

// worldCtx is the farm world's execution context in one document: its id in
// its renderer and its system-wide unique id, the one evaluations address
// (an id alone may name another context after a cross-process navigation).
type worldCtx struct {
	id  runtime.ExecutionContextID
	uid string
}

// noteContext keeps the farm world's newest context in the main frame, from
// the tab's Runtime events: Chrome announces a context before it answers the
// call that created it. Only the farm makes farm worlds, and only in the
// main frame's current document, so the newest is the one a call to
// Page.createIsolatedWorld answers, whether it made it or found it. A
// context destroyed is dropped; Runtime.executionContextsCleared is not
// followed: it may come late, from the renderer a cross-process navigation
// left, and a context it names is gone anyway, which an evaluation finds.
func (t *tab) noteContext(ev any) {
	switch e := ev.(type) {
	case *runtime.EventExecutionContextCreated:
		c := e.Context
		if c == nil || c.Name != farmWorldName {
			return
		}
		var aux struct {
			FrameID cdp.FrameID `json:"frameId"`
		}
		if json.Unmarshal(c.AuxData, &aux) != nil || aux.FrameID != cdp.FrameID(t.id) {
			return
		}
		t.mu.Lock()
		t.newestWorld = worldCtx{id: c.ID, uid: c.UniqueID}
		t.mu.Unlock()
	case *runtime.EventExecutionContextDestroyed:
		t.mu.Lock()
		if t.newestWorld.uid == e.ExecutionContextUniqueID {
			t.newestWorld = worldCtx{}
		}
		if t.world.uid == e.ExecutionContextUniqueID {
			t.world = worldCtx{}
		}
		t.mu.Unlock()
	}
}

// documentChanged forgets the farm world when the main frame commits a new
// document: the world was the old document's. After a cross-process
// navigation the old renderer never says its contexts were destroyed, and
// the new one answers an evaluation by the old unique id with
// "uniqueContextId not found" (which contextLost also takes as a lost
// context, for a commit this event has not yet reported).
func (t *tab) documentChanged(f *cdp.Frame) {
	if f == nil || f.ParentID != "" || f.ID != cdp.FrameID(t.id) {
		return
	}
	t.mu.Lock()
	t.world, t.newestWorld = worldCtx{}, worldCtx{}
	t.mainLoader = f.LoaderID
	t.docOrigin = f.SecurityOrigin
	t.unreachable = f.UnreachableURL
	close(t.committed)
	t.committed = make(chan struct{})
	t.mu.Unlock()
	t.withJob(func(j *jobState) { j.checkDoc() })
}

// mainLoaderID is the loader of the main frame's committed document ("":
// none committed on this tab yet).
func (t *tab) mainLoaderID() cdp.LoaderID {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mainLoader
}

// mainUnreachable is the URL the main frame's document loader failed to
// load, if the document committed is Chrome's error page for it ("" if it
// is not, or another document committed since).
func (t *tab) mainUnreachable(loader cdp.LoaderID) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mainLoader != loader {
		return ""
	}
	return t.unreachable
}

// mainOrigin is the origin of the main frame's committed document.
func (t *tab) mainOrigin() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.docOrigin
}

// farmWorld returns the farm world of the main frame's current document.
// The first call of a job (and the first after a navigation destroyed the
// world) asks for it: Page.createIsolatedWorld answers the world this
// document has, or makes one, and the context's announcement gives its
// unique id.
func (t *tab) farmWorld(ctx context.Context) (worldCtx, error) {
	t.mu.Lock()
	w := t.world
	t.mu.Unlock()
	if w.uid != "" {
		return w, nil
	}
	r, err := cdp.Call(ctx, t.t, page.CreateIsolatedWorld, page.CreateIsolatedWorldParams{FrameID: cdp.FrameID(t.id), WorldName: farmWorldName})
	if err != nil {
		return worldCtx{}, fmt.Errorf("Page.createIsolatedWorld: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.newestWorld.id != r.ExecutionContextID || t.newestWorld.uid == "" {
		// Destroyed already (the page navigated meanwhile): the caller's
		// evaluation fails as in a lost context and tries again.
		return worldCtx{}, errWorldGone
	}
	t.world = t.newestWorld
	return t.world, nil
}

// forgetWorld drops w after an evaluation found it gone, so that the next
// call asks for the world of the new document.
func (t *tab) forgetWorld(w worldCtx) {
	t.mu.Lock()
	if t.world == w {
		t.world = worldCtx{}
	}
	if t.newestWorld == w {
		t.newestWorld = worldCtx{}
	}
	t.mu.Unlock()
}

// errWorldGone is an isolated world destroyed before it could be used: the
// page navigated.
var errWorldGone = errors.New("the farm's isolated world was destroyed")

// evalFarm runs one of the farm's scripts in the farm world and returns its
// JSON value. A world the page's navigation destroyed is created again in
// the new document, once.
func (t *tab) evalFarm(ctx context.Context, expr string) (json.RawMessage, error) {
	for attempt := 0; ; attempt++ {
		w, err := t.farmWorld(ctx)
		if err == nil {
			var r *runtime.RemoteObject
			r, err = t.evalIn(ctx, w.uid, expr)
			if err == nil {
				return remoteValue(r), nil
			}
			if contextLost(err) {
				t.forgetWorld(w)
			}
		}
		if attempt > 0 || !contextLost(err) {
			return nil, err
		}
	}
}
