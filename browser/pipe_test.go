package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/page"
	"go.uber.org/zap"
)

// nopWriteCloser is the command pipe of a pipeConn that is only read.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// TestPipeConnBounds: within their bounds, messages pass as chromedp's pipe
// passes them; an event over its bound is dropped (a dialog's passes with
// its text cut), an answer over its bound
// reaches its caller, in its session, as an error; the stream goes on.
func TestPipeConnBounds(t *testing.T) {
	big := strings.Repeat("x", maxEventBytes)
	msgs := []string{
		`{"id":1,"result":{"v":"small"}}`,
		`{"method":"Runtime.consoleAPICalled","params":{"args":[{"description":"` + big + `"}]},"sessionId":"AB12"}`,
		`{"id":2,"result":{"data":"` + big + big + `"},"sessionId":"CD34"}`,
		`{"id":3,"result":{"data":"` + big + `"},"sessionId":"EF56"}`,
		``,
		`{"method":"Page.loadEventFired","params":{"timestamp":1},"sessionId":"AB12"}`,
		`{"method":"Page.javascriptDialogOpening","params":{"url":"http://a/","frameId":"F","message":"` + big + `","type":"confirm","hasBrowserHandler":true},"sessionId":"AB12"}`,
		`{"method":"Page.javascriptDialogOpening","params":{"url":"http://a/","frameId":"F","message":"` + big + `","type":"prompt","hasBrowserHandler":true,"defaultPrompt":"` + big + `"},"sessionId":"CD34"}`,
	}
	var stream bytes.Buffer
	for _, m := range msgs {
		stream.WriteString(m)
		stream.WriteByte(0)
	}
	total := stream.Len()
	c := newPipeConn(io.NopCloser(&stream), nopWriteCloser{io.Discard}, maxEventBytes+maxEventBytes/2, zap.NewNop())
	read := func() *cdproto.Message {
		t.Helper()
		var m cdproto.Message
		if err := c.Read(context.Background(), &m); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	if m := read(); m.ID != 1 || string(m.Result) != `{"v":"small"}` {
		t.Fatalf("small answer: %+v", m)
	}
	// The event over 4 MiB is dropped; the answer over the bound becomes
	// an error in its session.
	if m := read(); m.ID != 2 || m.SessionID != "CD34" || m.Error == nil || m.Error.Code != errCodeTooLarge || m.Result != nil {
		t.Fatalf("answer over the bound: %+v", m)
	}
	// An answer within the bound passes, though over the events' bound.
	if m := read(); m.ID != 3 || m.SessionID != "EF56" || len(m.Result) != len(big)+len(`{"data":""}`) {
		t.Fatalf("answer within the bound: id %d, session %q, %d bytes", m.ID, m.SessionID, len(m.Result))
	}
	if m := read(); m.Method != "Page.loadEventFired" || m.SessionID != "AB12" {
		t.Fatalf("event after the dropped one: %+v", m)
	}
	// A dialog over the bound passes with its texts cut: its page waits
	// for an answer. Its type is read from the tail, or taken as a kind
	// the tab dismisses when the tail does not hold it.
	for _, want := range []struct {
		session string
		typ     page.DialogType
	}{{"AB12", page.DialogTypeConfirm}, {"CD34", page.DialogTypeAlert}} {
		m := read()
		if m.Method != cdproto.EventPageJavascriptDialogOpening || string(m.SessionID) != want.session {
			t.Fatalf("dialog over the bound: %s in %q", m.Method, m.SessionID)
		}
		ev, err := cdproto.UnmarshalMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		d := ev.(*page.EventJavascriptDialogOpening)
		if d.Type != want.typ || len(d.Message) > 100 || d.DefaultPrompt != "" {
			t.Errorf("dialog over the bound: type %s, %d bytes of message, %d of prompt; want %s", d.Type, len(d.Message), len(d.DefaultPrompt), want.typ)
		}
	}
	if err := c.Read(context.Background(), &cdproto.Message{}); !errors.Is(err, io.EOF) {
		t.Fatalf("at the end: %v, want EOF", err)
	}
	if c.dropped.Load() != 1 || c.read.Load() != int64(total-len(msgs)) {
		t.Errorf("dropped %d, read %d bytes; want 1 and %d", c.dropped.Load(), c.read.Load(), total-len(msgs))
	}
}

// TestPipeConnMute: a muted session's events are dropped, its answers pass,
// other sessions and the browser's messages pass, and the session is
// forgotten once Chrome reports it detached.
func TestPipeConnMute(t *testing.T) {
	msgs := []string{
		`{"method":"Page.navigatedWithinDocument","params":{"frameId":"F","url":"http://a/#1"},"sessionId":"AB12"}`,
		`{"id":7,"result":{},"sessionId":"AB12"}`,
		`{"method":"Page.loadEventFired","params":{"timestamp":1},"sessionId":"CD34"}`,
		`{"method":"Target.detachedFromTarget","params":{"sessionId":"AB12","targetId":"T"}}`,
		`{"method":"Page.loadEventFired","params":{"timestamp":2},"sessionId":"AB12"}`,
	}
	var stream bytes.Buffer
	for _, m := range msgs {
		stream.WriteString(m)
		stream.WriteByte(0)
	}
	c := newPipeConn(io.NopCloser(&stream), nopWriteCloser{io.Discard}, DefaultMaxMessageBytes, zap.NewNop())
	c.mute("AB12")
	var got []string
	for {
		var m cdproto.Message
		if err := c.Read(context.Background(), &m); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
		got = append(got, fmt.Sprintf("%d %s %s", m.ID, m.Method, m.SessionID))
	}
	want := []string{"7  AB12", "0 Page.loadEventFired CD34", "0 Target.detachedFromTarget ", "0 Page.loadEventFired AB12"}
	if !slices.Equal(got, want) {
		t.Errorf("read %q, want %q", got, want)
	}
}
