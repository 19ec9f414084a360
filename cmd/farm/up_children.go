package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/browserfarm/browserfarm/browser/egress"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// consumerEnvironment is our environment plus set: the settings `farm up`
// decides replace any the environment had, and a consumer's identity
// (node id, health address) is never inherited, since K consumers share it.
// Other FARM_* settings (FARM_CHROME_FLAGS, FARM_MAX_EXTRACT_BYTES, …) reach the
// consumers as they would a `farm consumer` started by hand.
func consumerEnvironment(base []string, set map[string]string) []string {
	out := withoutVars(base, func(name string) bool {
		_, decided := set[name]
		return decided || name == "FARM_NODE_ID" || name == "FARM_HEALTH_ADDR"
	})
	for k, v := range set {
		if v != "" {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// checkConsumerEnv applies a consumer's own parsing and check (one rule)
// to the environment environ (KEY=value entries) farm up starts its
// consumers with, so that a value they would refuse is refused before
// anything starts. Its errors name the flag, which is farm up's too, or the
// variable a consumer would have read it from.
func checkConsumerEnv(environ []string) error {
	vars := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	_, err := parseConsumer(nil, func(k string) string { return vars[k] }, io.Discard)
	return err
}

// withoutVars is environ (KEY=value entries) less the variables drop names,
// in a slice of its own.
func withoutVars(environ []string, drop func(name string) bool) []string {
	var out []string
	for _, kv := range environ {
		if name, _, _ := strings.Cut(kv, "="); !drop(name) {
			out = append(out, kv)
		}
	}
	return out
}

// consumerCommand builds the command of consumer slot i for the fleet,
// which calls it from each slot's goroutine at every (re)start: path with
// args, base plus the slot's node id as environment, output to out[slot].
func consumerCommand(path string, args, base []string, hostname string, out []io.Writer) func(slot int) *exec.Cmd {
	return func(slot int) *exec.Cmd {
		cmd := exec.Command(path, args...)
		cmd.Env = consumerSlotEnv(base, nodeIDFor(hostname, slot))
		w := &wholeLines{w: out[slot]}
		cmd.Stdout, cmd.Stderr = w, w
		return cmd
	}
}

// wholeLines passes on only complete lines. A slot's successor, standing
// by, writes to the slot's log while its predecessor still does, each
// through a pipe of its own read in chunks: a line longer than the pipe
// writes atomically (4 KiB) could otherwise be spliced with the other
// process's output. One process's output is written by one goroutine
// (Stdout and Stderr are the same writer).
type wholeLines struct {
	w   io.Writer
	buf []byte
}

func (l *wholeLines) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	i := bytes.LastIndexByte(l.buf, '\n')
	if i < 0 && len(l.buf) <= 1<<20 {
		return len(p), nil
	}
	if i < 0 { // a runaway line: pass it on rather than hold it
		i = len(l.buf) - 1
	}
	// A write that fails (farm up's terminal gone after a SIGHUP: EIO; a
	// full disk) drops those lines. Returned, the error would end the
	// copy from the consumer's pipe, and the consumer's next log line
	// would kill it with SIGPIPE: mid-drain, or at every restart for as
	// long as farm up runs.
	_, _ = l.w.Write(l.buf[:i+1])
	l.buf = append(l.buf[:0], l.buf[i+1:]...)
	return len(p), nil
}

// Flush passes on a last line that has no newline, ended with one: the
// fleet calls it once the process has exited (its output copied), so the
// last words of a process that dies mid-line are not lost.
func (l *wholeLines) Flush() error {
	if len(l.buf) == 0 {
		return nil
	}
	_, _ = l.w.Write(append(l.buf, '\n'))
	l.buf = l.buf[:0]
	return nil
}

// consumerSlotEnv is base plus one consumer's node id, in a slice of its
// own. The fleet starts its slots concurrently: appending to a shared base
// whose backing array has room would let two children write (and receive)
// the same element, so two consumers would run under one node id.
func consumerSlotEnv(base []string, nodeID string) []string {
	env := make([]string, 0, len(base)+1)
	return append(append(env, base...), "FARM_NODE_ID="+nodeID)
}

// nodeIDFor names consumer slot i on this machine: the hostname made a node
// id by the consumers' own rule (jobqueue.NodeIDFrom), plus the slot. A
// restarted consumer keeps its slot's id, so it takes back what its
// predecessor left.
func nodeIDFor(hostname string, slot int) string {
	return jobqueue.NodeIDFrom(hostname, fmt.Sprintf("-%d", slot+1))
}

// childEvents counts events in the consumers' JSON logs as they stream past
// — what a log shipper would see — for the demo's live numbers.
type childEvents struct {
	chromeRecycles atomic.Int64
	chromeStarts   atomic.Int64
}

func (e *childEvents) watch(w io.Writer) io.Writer {
	return &lineWatcher{w: w, onLine: e.line}
}

func (e *childEvents) line(b []byte) {
	if !bytes.Contains(b, []byte(`"chrome `)) {
		return
	}
	var ev struct {
		Msg    string `json:"msg"`
		Reason string `json:"reason"`
	}
	if json.Unmarshal(b, &ev) != nil {
		return
	}
	switch {
	case ev.Msg == "chrome retired" && (ev.Reason == "recycle" || ev.Reason == "memory"):
		e.chromeRecycles.Add(1)
	case ev.Msg == "chrome started":
		e.chromeStarts.Add(1)
	}
}

// lineWatcher passes bytes through and calls onLine for each complete line.
type lineWatcher struct {
	mu     sync.Mutex
	w      io.Writer
	buf    []byte
	onLine func([]byte)
}

func (l *lineWatcher) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.onLine(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 1<<20 { // a runaway line: don't hold it
		l.buf = l.buf[:0]
	}
	return l.w.Write(p)
}

// rulesString is rules in the form --allow-destination takes.
func rulesString(rules []egress.Rule) string {
	s := make([]string, len(rules))
	for i, r := range rules {
		s[i] = r.String()
	}
	return strings.Join(s, ",")
}
