package browser

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// maxLogBytes bounds chrome.log. Chrome writes a page's console messages
// there (workers' too, which no guard in the page reaches: a worker logging
// 1 MB strings wrote 200 MB in 8 s), and a job may run five minutes on six
// sessions: unbounded, one job could fill the node's /tmp (an emptyDir of
// 2 GiB on Kubernetes) or the disk it shares with PostgreSQL.
const maxLogBytes = 8 << 20

// outputTailBytes is how much of Chrome's last output a start error quotes.
const outputTailBytes = 2000

// chromeOutput copies Chrome's stdout and stderr from a pipe into chrome.log
// in the profile, up to maxLogBytes, and keeps the last outputTailBytes in
// memory. Its goroutine ends when every process holding the pipe has
// exited, or when close closes the pipe.
type chromeOutput struct {
	r, file *os.File
	done    chan struct{}

	mu      sync.Mutex
	tail    []byte
	written int
	cut     bool
}

func newChromeOutput(r, file *os.File) *chromeOutput {
	o := &chromeOutput{r: r, file: file, done: make(chan struct{})}
	go o.copy()
	return o
}

func (o *chromeOutput) copy() {
	defer close(o.done)
	buf := make([]byte, 32<<10)
	for {
		n, err := o.r.Read(buf)
		if n > 0 {
			o.keep(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func (o *chromeOutput) keep(p []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.tail = append(o.tail, p...)
	if len(o.tail) > 2*outputTailBytes {
		o.tail = append(o.tail[:0], o.tail[len(o.tail)-outputTailBytes:]...)
	}
	if o.cut {
		return
	}
	if room := maxLogBytes - o.written; len(p) > room {
		p = p[:room]
		o.cut = true
	}
	n, _ := o.file.Write(p) // a full disk loses the log, not the browser
	o.written += n
	if o.cut {
		fmt.Fprintf(o.file, "\n[browserfarm: chrome.log stops at %d bytes; the rest of Chrome's output is dropped]\n", maxLogBytes)
	}
}

// last returns the end of Chrome's output. If Chrome has exited, it first
// waits up to wait for the pipe to drain.
func (o *chromeOutput) last(wait time.Duration) string {
	if wait > 0 {
		timer := time.NewTimer(wait)
		select {
		case <-o.done:
		case <-timer.C:
		}
		timer.Stop()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	s := string(o.tail)
	if len(s) > outputTailBytes {
		s = "…" + s[len(s)-outputTailBytes:]
	}
	return s
}

// close ends the copy (a process Kill could not reap may still hold the
// pipe) and closes the log.
func (o *chromeOutput) close() error {
	err := o.r.Close()
	<-o.done
	return errors.Join(err, o.file.Close())
}
