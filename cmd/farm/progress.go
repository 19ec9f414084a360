package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// plainProgressEvery is how often progress is printed as a plain line when
// the output is not a terminal (CI logs, nohup, a pipe): a bar redrawn with
// carriage returns many times a second is noise in a log file.
const plainProgressEvery = 5 * time.Second

// progress shows how far a batch of jobs is.
type progress interface {
	// Set reports done of total jobs finished; desc says what is going on.
	Set(done, total int64, desc string)
	// Finish ends the display after the last Set (all done).
	Finish()
	// Stop ends the display early (interrupted, failed).
	Stop()
}

// newProgress is a live bar when w is a terminal, else plain lines every
// plainProgressEvery; quiet shows nothing. opts style the bar.
func newProgress(w io.Writer, total int64, quiet bool, opts ...progressbar.Option) progress {
	switch {
	case quiet:
		return silentProgress{}
	case isTerminal(w):
		return &barProgress{bar: progressbar.NewOptions64(total, append([]progressbar.Option{progressbar.OptionSetWriter(w)}, opts...)...)}
	default:
		return &plainProgress{w: w, every: plainProgressEvery, now: time.Now, start: time.Now()}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

type silentProgress struct{}

func (silentProgress) Set(int64, int64, string) {}
func (silentProgress) Finish()                  {}
func (silentProgress) Stop()                    {}

type barProgress struct{ bar *progressbar.ProgressBar }

func (p *barProgress) Set(done, total int64, desc string) {
	if total != p.bar.GetMax64() {
		p.bar.ChangeMax64(total)
	}
	p.bar.Describe(desc)
	_ = p.bar.Set64(done)
}
func (p *barProgress) Finish() { _ = p.bar.Finish() }
func (p *barProgress) Stop()   { _ = p.bar.Exit() }

// plainProgress prints one line at the first Set, then at most one every
// `every`, and a last one at Finish.
type plainProgress struct {
	w           io.Writer
	every       time.Duration
	now         func() time.Time
	start, last time.Time
	done, total int64
	desc        string
	printed     bool
	printedDone int64
}

func (p *plainProgress) Set(done, total int64, desc string) {
	p.done, p.total, p.desc = done, total, desc
	if now := p.now(); p.last.IsZero() || now.Sub(p.last) >= p.every {
		p.last = now
		p.print()
	}
}

func (p *plainProgress) print() {
	p.printed, p.printedDone = true, p.done
	fmt.Fprintf(p.w, "%s: %d/%d finished (%d%%) after %s\n", p.desc, p.done, p.total, percentDone(p.done, p.total),
		p.now().Sub(p.start).Round(time.Second))
}

func (p *plainProgress) Finish() {
	if !p.printed || p.printedDone != p.done {
		p.print()
	}
}

func (p *plainProgress) Stop() { p.Finish() }

// percentDone is done of total in whole percent, rounded down: 100 only
// when every job is finished (299 of 300 is 99%, not 100%).
func percentDone(done, total int64) int64 {
	if total <= 0 {
		return 0
	}
	return 100 * done / total
}
