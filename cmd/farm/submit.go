package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/browserfarm/browserfarm/farm/web"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// specFlags are the common spec fields settable from the command line; they
// apply to plain-URL lines and fill unset fields of JSON-lines specs.
type specFlags struct {
	waitFor     string
	waitVisible bool
	networkIdle bool
	extract     string
	html        bool
	screenshot  bool
	priority    int
	maxAttempts int
	timeout     time.Duration
	block       string
	headers     multiFlag
	userAgent   string
	proxy       string
	cache       string
	follow      string
	followDepth int
	followMax   int
	anyHost     bool
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ", ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func (f *specFlags) register(fs *flagSet) {
	fs.StringVar(&f.waitFor, "wait-for", "", "CSS selector of an element that must be in the page before extraction")
	fs.BoolVar(&f.waitVisible, "wait-visible", false, "with --wait-for: the element must also be rendered, with a width and a height")
	fs.BoolVar(&f.networkIdle, "network-idle", false, "also wait until the network is idle")
	fs.StringVar(&f.extract, "extract", "", "JavaScript expression whose JSON value is the result's data")
	fs.BoolVar(&f.html, "html", false, "keep the page's HTML")
	fs.BoolVar(&f.screenshot, "screenshot", false, "keep a PNG screenshot")
	fs.IntVar(&f.priority, "priority", 0, "priority, -1000..1000 (higher runs first)")
	fs.count(&f.maxAttempts, "max-attempts", jobqueue.DefaultAttempts, 1, fmt.Sprintf("attempts before a job fails, 1..%d", jobqueue.MaxMaxAttempts))
	fs.DurationVar(&f.timeout, "timeout", jobqueue.DefaultTimeoutMS*time.Millisecond, fmt.Sprintf("bound on one render, %v..%v",
		jobqueue.MinTimeoutMS*time.Millisecond, jobqueue.MaxTimeoutMS*time.Millisecond))
	fs.StringVar(&f.block, "block", "", "resource types not to load, comma-separated: image,font,media,stylesheet")
	fs.Var(&f.headers, "header", "extra request header 'Name: value' (repeatable)")
	fs.StringVar(&f.userAgent, "user-agent", "", "user agent override")
	fs.StringVar(&f.proxy, "proxy", "", "proxy for these jobs, e.g. http://user:pass@host:3128")
	fs.StringVar(&f.cache, "cache", "", "batch: the jobs of this submission share the HTTP cache on a browser session (isolation wipe); job (the default): each its own")
	fs.StringVar(&f.follow, "follow", "", "CSS selector of links to enqueue as child jobs")
	fs.count(&f.followDepth, "follow-depth", jobqueue.DefaultFollowDepth, 1,
		fmt.Sprintf("with --follow: how many links deep to follow (1..%d)", jobqueue.MaxFollowDepth))
	fs.count(&f.followMax, "follow-max-links", jobqueue.DefaultMaxLinks, 1,
		fmt.Sprintf("with --follow: the most links followed from one page (1..%d); the result counts the rest as links_over_limit", jobqueue.MaxFollowLinks))
	fs.BoolVar(&f.anyHost, "follow-any-host", false, "with --follow: follow links to other hosts too")
}

// followOptions are the flags that shape --follow's crawl: without it they
// have nothing to apply to.
var followOptions = []string{"follow-depth", "follow-any-host", "follow-max-links"}

// check refuses options that need another one left out, naming the flag
// (given: set on the command line or by its variable). A line's own
// "follow" is not one: the options fill only --follow's.
func (f *specFlags) check(given func(name string) bool) error {
	if f.follow == "" {
		for _, name := range followOptions {
			if given(name) {
				return usagef("--%s needs --follow", name)
			}
		}
	}
	return nil
}

// given is the set of fields a JSON spec line names, by path
// (jobqueue.DecodeSpecFields: "priority", "wait.network_idle"): the line's
// own value wins over a flag's even when it is the empty one (priority 0,
// html false).
type given map[string]bool

// has reports whether the line names the field (DecodeSpec takes keys in
// their exact case only).
func (g given) has(field string) bool { return g[field] }

// apply fills the fields of s that the flags set and the line does not
// name (g: nil for a URL line, which names none).
func (f *specFlags) apply(s *jobqueue.Spec, g given) error {
	if f.waitVisible && f.waitFor == "" {
		return usagef("--wait-visible needs --wait-for")
	}
	if (f.waitFor != "" && !g.has("wait.selector")) || (f.networkIdle && !g.has("wait.network_idle")) {
		if s.Wait == nil {
			s.Wait = &jobqueue.Wait{}
		}
		if !g.has("wait.selector") && f.waitFor != "" {
			s.Wait.Selector = f.waitFor
			if !g.has("wait.visible") {
				s.Wait.Visible = f.waitVisible
			}
		}
		if !g.has("wait.network_idle") {
			s.Wait.NetworkIdle = f.networkIdle
		}
	}
	if !g.has("extract") {
		s.Extract = f.extract
	}
	if !g.has("html") {
		s.HTML = f.html
	}
	if !g.has("screenshot") {
		s.Screenshot = f.screenshot
	}
	if !g.has("priority") {
		s.Priority = f.priority
	}
	if !g.has("max_attempts") {
		s.MaxAttempts = f.maxAttempts
	}
	if !g.has("timeout_ms") {
		s.TimeoutMS = int(f.timeout / time.Millisecond)
	}
	if !g.has("block") && f.block != "" {
		for _, b := range strings.Split(f.block, ",") {
			if b = strings.TrimSpace(b); b != "" {
				s.Block = append(s.Block, b)
			}
		}
	}
	// Headers merge by name: the line's header of a name wins.
	for _, h := range f.headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return usagef("--header %q: want 'Name: value'", h)
		}
		if s.Headers == nil {
			s.Headers = map[string]string{}
		}
		if _, set := s.Headers[strings.TrimSpace(name)]; !set {
			s.Headers[strings.TrimSpace(name)] = strings.TrimSpace(value)
		}
	}
	if !g.has("user_agent") {
		s.UserAgent = f.userAgent
	}
	if !g.has("proxy") {
		s.Proxy = f.proxy
	}
	// Its values are the spec's, checked with the spec (naming the field).
	if !g.has("cache") {
		s.Cache = f.cache
	}
	if !g.has("follow") && f.follow != "" {
		s.Follow = &jobqueue.Follow{Selector: f.follow, MaxDepth: f.followDepth, AnyHost: f.anyHost, MaxLinks: f.followMax}
	}
	return nil
}

// inputLine remembers where a spec came from, so errors can name the line.
type inputLine struct {
	source string // file name, "stdin" or "argument"
	line   int
	given  given // the fields a JSON line names; nil for a URL
}

// specFieldFlags are the spec fields a flag fills when the line leaves
// them out (apply): field is the start of the validator's path, lineKey
// what the line names to keep its own.
var specFieldFlags = []struct{ field, lineKey, flag string }{
	{"wait.selector", "wait.selector", "wait-for"},
	{"wait.visible", "wait.visible", "wait-visible"},
	{"wait.network_idle", "wait.network_idle", "network-idle"},
	{"extract", "extract", "extract"},
	{"priority", "priority", "priority"},
	{"max_attempts", "max_attempts", "max-attempts"},
	{"timeout_ms", "timeout_ms", "timeout"},
	{"block", "block", "block"},
	{"headers", "headers", "header"},
	{"user_agent", "user_agent", "user-agent"},
	{"proxy", "proxy", "proxy"},
	{"cache", "cache", "cache"},
	{"follow.selector", "follow", "follow"},
	{"follow.max_depth", "follow", "follow-depth"},
	{"follow.max_links", "follow", "follow-max-links"},
}

// flagOf names the flag a bad field's value came from, "" when the line
// gave it: the field is one a flag fills, the flag was given (isGiven),
// and the line left the field out — or, for headers, which merge, named
// the header only through --header.
func (f *specFlags) flagOf(field string, g given, isGiven func(string) bool) string {
	for _, m := range specFieldFlags {
		if field != m.field && !strings.HasPrefix(field, m.field+"[") && !strings.HasPrefix(field, m.field+".") {
			continue
		}
		if !isGiven(m.flag) {
			return ""
		}
		if !g.has(m.lineKey) {
			return m.flag
		}
		if m.lineKey == "headers" {
			for _, h := range f.headers {
				name, _, _ := strings.Cut(h, ":")
				if field == fmt.Sprintf("headers[%q]", strings.TrimSpace(name)) {
					return m.flag
				}
			}
		}
		return ""
	}
	return ""
}

func (l inputLine) String() string {
	if l.source == "argument" {
		return fmt.Sprintf("argument %d", l.line)
	}
	return fmt.Sprintf("%s line %d", l.source, l.line)
}

// maxLineBytes bounds a line of farm submit's input: the API's bound on a
// request body (POST /api/jobs), so that a spec the API would take whole is
// a line submit takes, and a line over it is refused in the API's words
// rather than by the reader's buffer. A spec under it but over the queue's
// own bounds (cookies, URL length, the spec's size) is then refused by the
// decoder and validator the API uses, naming the field.
const maxLineBytes = web.DefaultMaxBodyBytes

// lineTooLong is the error of a line over maxLineBytes, named by its number.
func lineTooLong(source string, n int) error {
	return fmt.Errorf("%s line %d: %s, the bound on a request body of POST /api/jobs", source, n, web.TooLarge("the line", maxLineBytes))
}

// readSpecs reads one job per line: a URL, or a JSON object (a job spec).
// Blank lines and lines starting with # are skipped. A malformed line is an
// error naming the line; nothing is returned then.
func readSpecs(r io.Reader, source string, flags *specFlags) ([]jobqueue.Spec, []inputLine, error) {
	var specs []jobqueue.Spec
	var where []inputLine
	sc := bufio.NewScanner(r)
	// One byte over the bound: a line of exactly the bound, with its
	// newline, fits; a longer one is ErrTooLong, or (the last line, with
	// no newline) longer than the bound.
	sc.Buffer(make([]byte, 64*1024), maxLineBytes+1)
	n := 0
	for sc.Scan() {
		n++
		if len(sc.Bytes()) > maxLineBytes {
			return nil, nil, lineTooLong(source, n)
		}
		// A byte-order mark (an editor's, at the head of a file) is no
		// part of a URL or of JSON: dropped from any line.
		text := strings.TrimSpace(strings.TrimPrefix(sc.Text(), byteOrderMark))
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		spec, g, err := parseSpecLine(text, flags)
		if err != nil {
			return nil, nil, fmt.Errorf("%s line %d: %w", source, n, err)
		}
		specs = append(specs, spec)
		where = append(where, inputLine{source, n, g})
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, nil, lineTooLong(source, n+1)
	} else if err != nil {
		return nil, nil, fmt.Errorf("%s line %d: %w", source, n+1, err)
	}
	return specs, where, nil
}

// byteOrderMark is UTF-8's, which some editors write at a file's head.
const byteOrderMark = "\ufeff"

// parseSpecLine reads one line or argument: its spec, with the flags
// applied, and the fields a JSON line names (nil for a URL).
func parseSpecLine(text string, flags *specFlags) (jobqueue.Spec, given, error) {
	var spec jobqueue.Spec
	var g given
	if strings.HasPrefix(text, "[") {
		return spec, nil, errors.New("a JSON array: give one JSON object (job spec) per line")
	}
	if strings.HasPrefix(text, "{") {
		var err error
		if spec, g, err = jobqueue.DecodeSpecFields([]byte(text)); err != nil {
			return spec, nil, fmt.Errorf("bad JSON job spec: %w", err)
		}
	} else {
		spec.URL = text
	}
	if err := flags.apply(&spec, g); err != nil {
		return spec, nil, err
	}
	return spec, g, nil
}

// locateSpecError rewrites the queue's "job N" validation error into the
// user's terms: the file and line (or argument) the job came from, and the
// flag its value came from (flagOf: "" for none), which realMain then
// points at its variable when the environment set it.
func locateSpecError(err error, where []inputLine, flagOf func(field string, g given) string) error {
	var se *jobqueue.SpecError
	if errors.As(err, &se) && se.Index >= 0 && se.Index < len(where) {
		from := ""
		if flag := flagOf(se.Field, where[se.Index].given); flag != "" {
			from = " (from --" + flag + ")"
		}
		return fmt.Errorf("%s: field %q: %s%s (nothing was submitted)", where[se.Index], se.Field, se.Msg, from)
	}
	return err
}

func runSubmit(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet("submit", "[flags] [URL ...]   (or --file FILE, or '-' for stdin)", env.stderr)
	var db dbOptions
	var sf specFlags
	var file string
	var wait bool
	var quiet bool
	db.register(fs)
	db.registerLocal(fs, env.getenv)
	sf.register(fs)
	fs.StringVar(&file, "file", "", "read jobs from this file ('-' for stdin): one URL or JSON job spec per line")
	// What to submit comes from the command line only: a FARM_FILE left
	// in the environment would add a whole file to `farm submit URL`.
	fs.commandLineOnly("file")
	fs.BoolVar(&wait, "wait", false, "follow the batch with a progress bar until every job is finished")
	fs.BoolVar(&quiet, "quiet", false, "print only the batch id (with --wait: no progress and no summary either; the exit status says whether every job completed, those of followed links too)")
	if err := fs.parse(args, env.getenv); err != nil {
		return err
	}
	if err := sf.check(fs.isGiven); err != nil {
		return err
	}
	if lo, hi := jobqueue.MinTimeoutMS*time.Millisecond, jobqueue.MaxTimeoutMS*time.Millisecond; sf.timeout < lo || sf.timeout > hi {
		return usagef("--timeout %v: use %v..%v", sf.timeout, lo, hi)
	}

	var specs []jobqueue.Spec
	var where []inputLine
	rest := fs.Args()
	stdinArg := slices.Index(rest, "-") // 0-based; -1 for none
	if stdinArg >= 0 {
		// Stdin as an argument is --file -: its lines first, then the
		// URLs, as with --file.
		if file != "" || slices.Contains(rest[stdinArg+1:], "-") {
			return usagef("'-' reads the jobs of stdin, as --file does: give one input to read")
		}
		file, rest = "-", slices.Delete(slices.Clone(rest), stdinArg, stdinArg+1)
	}
	if file != "" {
		var r io.Reader = env.stdin
		source := "stdin"
		if file != "-" {
			b, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("--file: %w", err)
			}
			r, source = bytes.NewReader(b), file
		}
		var err error
		if specs, where, err = readSpecs(r, source, &sf); err != nil {
			// A line that does not parse is the input's fault, as one that
			// does not validate (below): bad usage, nothing submitted.
			return usagef("%v (nothing was submitted)", err)
		}
	}
	for i, a := range rest {
		n := i + 1 // as the user counts the arguments, '-' among them
		if stdinArg >= 0 && i >= stdinArg {
			n++
		}
		spec, _, err := parseSpecLine(a, &sf)
		if err != nil {
			return usagef("argument %d: %v (nothing was submitted)", n, err)
		}
		specs = append(specs, spec)
		where = append(where, inputLine{"argument", n, nil})
	}
	if len(specs) == 0 {
		return usagef("no jobs: give URLs as arguments, --file FILE, or '-' to read stdin")
	}
	flagOf := func(field string, g given) string { return sf.flagOf(field, g, fs.isGiven) }
	// Validate before connecting: a bad line is the user's to fix, not a database error.
	for i := range specs {
		if err := specs[i].Validate(); err != nil {
			var se *jobqueue.SpecError
			if errors.As(err, &se) {
				se.Index = i
			}
			// The input is the user's to fix: bad usage.
			return usagef("%v", locateSpecError(err, where, flagOf))
		}
	}
	pool, err := db.pool(ctx, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	q := jobqueue.New(pool, jobqueue.Config{})
	batch, ids, err := q.Enqueue(ctx, specs)
	if err != nil {
		return locateSpecError(err, where, flagOf)
	}
	if quiet {
		fmt.Fprintln(env.stdout, batch)
	} else {
		fmt.Fprintf(env.stdout, "submitted %d jobs (ids %d..%d) as batch %s\n", len(ids), ids[0], ids[len(ids)-1], batch)
	}
	if !wait {
		return nil
	}
	sum, err := followBatch(ctx, q, batch, len(ids), env.stderr, quiet)
	if err != nil {
		return err
	}
	// Followed links join the batch: its submitted jobs are counted apart.
	all, submitted := sum.counts, sum.counts
	if all.Total != int64(len(ids)) {
		if submitted, err = q.BatchSubmittedCounts(ctx, batch); err != nil {
			return err
		}
	}
	if !quiet {
		followed := ""
		if n := all.Total - submitted.Total; n > 0 {
			followed = fmt.Sprintf(" (%d submitted, %d followed)", submitted.Total, n)
		}
		fmt.Fprintf(env.stdout, "batch %s: %d completed, %d failed, %d canceled in %s%s\n",
			batch, all.By[jobqueue.StateCompleted], all.By[jobqueue.StateFailed], all.By[jobqueue.StateCanceled],
			sum.took.Round(time.Millisecond), followed)
	}
	return waitVerdict(batch, all, submitted)
}

// waitVerdict is the end of farm submit --wait: nil when every job of the
// batch completed, the jobs of its followed links too (--quiet's help,
// README), else an error that counts the submitted jobs and the followed
// ones apart, each against its own number.
func waitVerdict(batch string, all, submitted jobqueue.BatchCounts) error {
	failed, canceled := all.By[jobqueue.StateFailed], all.By[jobqueue.StateCanceled]
	if failed == 0 && canceled == 0 {
		return nil
	}
	var states []string
	if failed > 0 {
		states = append(states, string(jobqueue.StateFailed))
	}
	if canceled > 0 {
		states = append(states, string(jobqueue.StateCanceled))
	}
	words := unfinished("", submitted)
	if all.Total > submitted.Total {
		followed := jobqueue.BatchCounts{Total: all.Total - submitted.Total, By: map[jobqueue.State]int64{}}
		for st, n := range all.By {
			followed.By[st] = n - submitted.By[st]
		}
		words = unfinished("submitted ", submitted) + "; " + unfinished("followed ", followed)
	}
	return fmt.Errorf("%s (see: farm results --batch %s --state %s)", words, batch, strings.Join(states, ","))
}

// unfinished says how many of c's jobs (kind: "submitted ", "followed ",
// or "") failed and were canceled: "1 of 3 jobs failed, 1 canceled",
// "2 of 2 followed jobs canceled".
func unfinished(kind string, c jobqueue.BatchCounts) string {
	failed, canceled := c.By[jobqueue.StateFailed], c.By[jobqueue.StateCanceled]
	if failed == 0 && canceled > 0 {
		return fmt.Sprintf("%d of %d %sjobs canceled", canceled, c.Total, kind)
	}
	s := fmt.Sprintf("%d of %d %sjobs failed", failed, c.Total, kind)
	if canceled > 0 {
		s += fmt.Sprintf(", %d canceled", canceled)
	}
	return s
}
