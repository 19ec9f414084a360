package browser

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/chromedp/cdproto"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"go.uber.org/zap"
)

// A page decides how large many CDP messages are: a console call's
// arguments (an Error's stack, a function's source), a WebSocket frame, a
// data: URL or a POST body in a Network event, a dialog's text. chromedp
// reads a message whole and decodes it at about ten times its size (a
// 256 MB console argument: 2.9 GB in this process), so one page could make
// the node run out of memory. The pipe reads each message in bounded
// memory instead: an event over maxEventBytes is dropped (nothing the
// farm needs from an event is that large) but for a dialog, which passes
// with its text cut, and an answer over Options.MaxMessageBytes reaches
// its caller as an error.
const (
	// maxEventBytes bounds an event. The farm reads URLs (at most 2 MB in
	// Chrome), headers and short texts from events.
	maxEventBytes = 4 << 20
	// DefaultMaxMessageBytes is Options.MaxMessageBytes when 0: above the
	// largest answer the farm asks for with its default result caps (a
	// 4K screenshot of noise, about 25 MB of PNG, 34 MB in base64).
	DefaultMaxMessageBytes = 64 << 20
	// keepTail is how much of a message's end is kept past the bound: the
	// session id of a flattened session's message is its last field.
	keepTail = 512
)

// errCodeTooLarge is the code of the error an answer over the bound is
// replaced with (JSON-RPC's range for server errors).
const errCodeTooLarge = -32099

var (
	answerPrefix    = []byte(`{"id":`)
	eventPrefix     = []byte(`{"method":`)
	leadingID       = regexp.MustCompile(`^\{"id":(\d+),`)
	leadingMethod   = regexp.MustCompile(`^\{"method":"([A-Za-z.]+)"`)
	trailingSession = regexp.MustCompile(`,"sessionId":"([0-9A-Fa-f]+)"\}\s*$`)
	// A dialog event's type follows its message and precedes its
	// hasBrowserHandler and, for a prompt, its default text.
	trailingDialogType = regexp.MustCompile(`"type":"(alert|confirm|prompt|beforeunload)","hasBrowserHandler":`)
)

// pipeConn is chromedp's pipe transport with messages from Chrome read in
// bounded memory. Write and Close are chromedp.PipeConn's.
type pipeConn struct {
	*chromedp.PipeConn
	br       *bufio.Reader
	maxReply int
	log      *zap.Logger
	// read counts the bytes read, dropped the events dropped and
	// droppedBytes their bytes.
	read, dropped, droppedBytes atomic.Int64

	// muted are the sessions whose events are dropped (mute), until
	// Chrome reports them detached; nmuted is their number, read without
	// the lock on every message.
	mu     sync.Mutex
	muted  map[target.SessionID]bool
	nmuted atomic.Int32
}

func newPipeConn(r io.ReadCloser, w io.WriteCloser, maxReply int, log *zap.Logger) *pipeConn {
	return &pipeConn{PipeConn: chromedp.NewPipeConn(r, w), br: bufio.NewReaderSize(r, 64<<10), maxReply: maxReply, log: log}
}

// mute drops the session's events from now until Chrome reports it
// detached; answers still pass (TestPipeConnMute). chromedp routes every
// message of the connection through one goroutine, which blocks while a
// tab's queue (1,024 messages) is full: a page that floods events after its
// tab's reader stopped held every session of the Chrome (a console loop did,
// before the console guard stopped forwarding console.log: the other
// session's renders failed, "chrome did not answer"). tab.quiet mutes the
// session before the reader's context is canceled.
func (c *pipeConn) mute(id target.SessionID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.muted == nil {
		c.muted = map[target.SessionID]bool{}
	}
	c.muted[id] = true
	c.nmuted.Store(int32(len(c.muted)))
}

// mutedEvent reports whether b, a whole message, is an event of a muted
// session: told from its first and last bytes, before any decoding.
func (c *pipeConn) mutedEvent(b []byte) bool {
	if c.nmuted.Load() == 0 || !bytes.HasPrefix(b, eventPrefix) {
		return false
	}
	m := trailingSession.FindSubmatch(b[max(0, len(b)-keepTail):])
	if m == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.muted[target.SessionID(m[1])]
}

// noteDetached forgets a muted session that Chrome reports detached.
func (c *pipeConn) noteDetached(msg *cdproto.Message) {
	if msg.Method != cdproto.EventTargetDetachedFromTarget || msg.SessionID != "" {
		return
	}
	if c.nmuted.Load() == 0 {
		return
	}
	var ev target.EventDetachedFromTarget
	if jsonv2.Unmarshal(msg.Params, &ev) != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.muted, ev.SessionID)
	c.nmuted.Store(int32(len(c.muted)))
}

// Read reads the next message that is within its bound, or the error that
// replaces an answer over it.
func (c *pipeConn) Read(_ context.Context, msg *cdproto.Message) error {
	for {
		b, size, tail, err := c.next()
		if err != nil {
			return err
		}
		if tail == nil {
			if len(bytes.TrimSpace(b)) == 0 {
				continue
			}
			if c.mutedEvent(b) {
				continue
			}
			*msg = cdproto.Message{}
			if err := jsonv2.Unmarshal(b, msg, chromedp.DefaultUnmarshalOptions); err != nil {
				return err
			}
			c.noteDetached(msg)
			return nil
		}
		if m := leadingID.FindSubmatch(b); m != nil {
			id, _ := strconv.ParseInt(string(m[1]), 10, 64)
			*msg = cdproto.Message{ID: id, Error: &cdproto.Error{Code: errCodeTooLarge,
				Message: fmt.Sprintf("Chrome's answer is %d bytes, over the node's bound of %d bytes", size, c.maxReply)}}
			if s := trailingSession.FindSubmatch(tail); s != nil {
				msg.SessionID = target.SessionID(s[1])
			}
			return nil
		}
		method := "unknown"
		if m := leadingMethod.FindSubmatch(b); m != nil {
			method = string(m[1])
		}
		if method == cdproto.EventPageJavascriptDialogOpening {
			// A dialog stops its page until it is answered: dropped, its
			// job would wait out its timeout. It passes with its text
			// replaced; the tab answers it by its type, in the tail unless
			// the prompt's default text is over the bound too, and then
			// it is not beforeunload (a page does not choose that text).
			*msg = cutDialog(size, tail)
			c.log.Warn("cut a dialog's text over the size bound",
				zap.Int("bytes", size), zap.Int("bound", maxEventBytes))
			return nil
		}
		c.dropped.Add(1)
		c.droppedBytes.Add(int64(size))
		c.log.Warn("dropped an event from Chrome over the size bound",
			zap.String("method", method), zap.Int("bytes", size), zap.Int("bound", maxEventBytes))
	}
}

// cutDialog is the Page.javascriptDialogOpening event over the bound
// whose size and last bytes are given, with its texts left out.
func cutDialog(size int, tail []byte) cdproto.Message {
	typ := page.DialogTypeAlert
	if m := trailingDialogType.FindSubmatch(tail); m != nil {
		typ = page.DialogType(m[1])
	}
	params, _ := jsonv2.Marshal(page.EventJavascriptDialogOpening{
		Message: fmt.Sprintf("[browserfarm: the dialog's %d bytes are over the bound]", size),
		Type:    typ,
	})
	msg := cdproto.Message{Method: cdproto.EventPageJavascriptDialogOpening, Params: params}
	if s := trailingSession.FindSubmatch(tail); s != nil {
		msg.SessionID = target.SessionID(s[1])
	}
	return msg
}

// next reads one message up to its NUL. Within the bound it returns the
// message (tail nil). Past it, it returns the message's first bytes, its
// size and its last keepTail bytes, having read the rest without keeping
// it. The first chunk tells an answer from an event: the reader's buffer
// holds far more than a message's opening.
func (c *pipeConn) next() (head []byte, size int, tail []byte, err error) {
	// The chunks of a message within its bound, each copied once and
	// joined once at the end: a new buffer per message, as chromedp's
	// pipe has (the decoded message may keep parts of it), without
	// regrowing one buffer through a large answer.
	var pieces [][]byte
	var ring []byte // past the bound: the message's last bytes
	over := false
	bound := maxEventBytes
	for first := true; ; first = false {
		chunk, rerr := c.br.ReadSlice(0)
		done := rerr == nil
		if rerr != nil && rerr != bufio.ErrBufferFull {
			if rerr == io.EOF && size+len(chunk) > 0 {
				return nil, 0, nil, io.ErrUnexpectedEOF
			}
			return nil, 0, nil, rerr
		}
		if done {
			chunk = chunk[:len(chunk)-1] // the NUL
		}
		if first && bytes.HasPrefix(chunk, answerPrefix) {
			bound = c.maxReply
		}
		size += len(chunk)
		switch {
		case over:
			ring = append(ring, chunk...)
		case size > bound:
			over = true
			opening := chunk
			if len(pieces) > 0 {
				opening = pieces[0]
				last := pieces[len(pieces)-1]
				ring = append(ring, last[max(0, len(last)-keepTail):]...)
			}
			head = bytes.Clone(opening[:min(len(opening), 256)])
			ring = append(ring, chunk...)
			pieces = nil
		default:
			pieces = append(pieces, bytes.Clone(chunk))
		}
		if len(ring) > 4*keepTail {
			ring = append(ring[:0], ring[len(ring)-keepTail:]...)
		}
		if done {
			break
		}
	}
	c.read.Add(int64(size))
	if over {
		return head, size, ring[max(0, len(ring)-keepTail):], nil
	}
	if len(pieces) == 1 {
		return pieces[0], size, nil, nil
	}
	msg := make([]byte, 0, size)
	for _, p := range pieces {
		msg = append(msg, p...)
	}
	return msg, size, nil, nil
}
