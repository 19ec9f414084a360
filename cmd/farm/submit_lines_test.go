package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// manyCookies is a JSON spec of n cookies of size-byte values: with 2,000
// of 600 bytes, over a mebibyte on one line.
func manyCookies(n, size int) string {
	var b strings.Builder
	b.WriteString(`{"url":"https://a.example/","cookies":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"c%d","value":"%s"}`, i, strings.Repeat("v", size))
	}
	b.WriteString(`]}`)
	return b.String()
}

// A line is read up to the API's bound on a request body: a spec under it
// is refused by the decoder and validator the API uses, naming the field
// and its bound (not "bufio.Scanner: token too long"); a line over it by
// its number and the bound, in the API's words.
func TestReadSpecsLongLines(t *testing.T) {
	over := strings.Repeat("x", maxLineBytes+1)
	for _, tc := range []struct {
		name, in, want string
	}{
		{"2,000 cookies over a MiB", manyCookies(2000, 600) + "\n", `field "cookies": 2000 cookies; at most 50 are allowed`},
		{"a 3 MB URL", "https://a.example/" + strings.Repeat("a", 3<<20) + "\n", fmt.Sprintf(`field "url": %d bytes; at most %d are allowed`, len("https://a.example/")+3<<20, jobqueue.MaxURLLength)},
		{"a line over the bound", "https://a.example/\n" + over + "\nhttps://b.example/\n", fmt.Sprintf("jobs.txt line 2: the line is larger than %d bytes, the bound on a request body of POST /api/jobs", maxLineBytes)},
		{"a last line over the bound, no newline", "https://a.example/\n" + over, fmt.Sprintf("jobs.txt line 2: the line is larger than %d bytes", maxLineBytes)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			specs, _, err := readSpecs(strings.NewReader(tc.in), "jobs.txt", &specFlags{})
			for i := 0; err == nil && i < len(specs); i++ {
				err = specs[i].Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %.300v, want %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "token too long") {
				t.Errorf("err = %.300v: the scanner's words, not the bound's", err)
			}
		})
	}
	// A line of exactly the bound is read (and then refused by the
	// validator as a URL, not by the reader).
	if _, _, err := readSpecs(strings.NewReader(over[1:]+"\n"), "jobs.txt", &specFlags{}); err != nil {
		t.Errorf("a line of %d bytes: %.200v, want it read", maxLineBytes, err)
	}
	var se *jobqueue.SpecError
	if specs, _, err := readSpecs(strings.NewReader(manyCookies(2000, 600)), "jobs.txt", &specFlags{}); err != nil || !errors.As(specs[0].Validate(), &se) || se.Field != "cookies" {
		t.Errorf("2,000 cookies: %.200v, want a spec the validator refuses naming cookies", err)
	}
}

// The options of --follow's crawl without --follow are refused, as
// --wait-visible without --wait-for is, naming the flag (or its variable).
func TestSubmitFollowOptionsNeedFollow(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string // "" : not refused for this
	}{
		{"depth", nil, []string{"--follow-depth", "3"}, "--follow-depth needs --follow"},
		{"any host", nil, []string{"--follow-any-host"}, "--follow-any-host needs --follow"},
		{"max links", nil, []string{"--follow-max-links", "5"}, "--follow-max-links needs --follow"},
		{"depth from the environment", map[string]string{"FARM_FOLLOW_DEPTH": "3"}, nil,
			"--follow-depth needs --follow (set by FARM_FOLLOW_DEPTH in the environment, not on the command line)"},
		{"with --follow", nil, []string{"--follow", "a", "--follow-depth", "3", "--follow-any-host"}, ""},
		{"with FARM_FOLLOW", map[string]string{"FARM_FOLLOW": "a"}, []string{"--follow-depth", "3"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"FARM_DATA_DIR": t.TempDir()} // no farm there: nothing is submitted
			for k, v := range tc.env {
				env[k] = v
			}
			code, _, errOut := farmRun(t, "", env, append([]string{"submit"}, append(tc.args, "https://a.example/")...)...)
			switch {
			case tc.want != "" && (code != exitUsage || !strings.Contains(errOut, tc.want)):
				t.Errorf("exit %d, %q; want %d and %q", code, errOut, exitUsage, tc.want)
			case tc.want == "" && strings.Contains(errOut, "needs --follow"):
				t.Errorf("refused with --follow: %q", errOut)
			}
		})
	}
}

// A bad value of a spec option set by its FARM_* variable is named by the
// variable, whether the flag's parse or the spec's validator refuses it
// (FARM_TIMEOUT=-5s did, FARM_CACHE=forever did not); a value the line
// gives itself is the line's.
func TestSubmitOptionErrorsNameTheirVariable(t *testing.T) {
	long := strings.Repeat("a", 40<<10)
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string // "" : no variable named
	}{
		{map[string]string{"FARM_CACHE": "forever"}, nil, "FARM_CACHE"},
		{map[string]string{"FARM_TIMEOUT": "-5s"}, nil, "FARM_TIMEOUT"},
		{map[string]string{"FARM_PRIORITY": "5000"}, nil, "FARM_PRIORITY"},
		{map[string]string{"FARM_MAX_ATTEMPTS": "99"}, nil, "FARM_MAX_ATTEMPTS"},
		{map[string]string{"FARM_BLOCK": "video"}, nil, "FARM_BLOCK"},
		{map[string]string{"FARM_PROXY": "ftp://h:21"}, nil, "FARM_PROXY"},
		{map[string]string{"FARM_USER_AGENT": long}, nil, "FARM_USER_AGENT"},
		{map[string]string{"FARM_HEADER": "Host: x"}, nil, "FARM_HEADER"},
		{map[string]string{"FARM_EXTRACT": long}, nil, "FARM_EXTRACT"},
		{map[string]string{"FARM_WAIT_FOR": long}, nil, "FARM_WAIT_FOR"},
		{map[string]string{"FARM_WAIT_VISIBLE": "true"}, nil, "FARM_WAIT_VISIBLE"},
		{map[string]string{"FARM_NETWORK_IDLE": "maybe"}, nil, "FARM_NETWORK_IDLE"},
		{map[string]string{"FARM_HTML": "maybe"}, nil, "FARM_HTML"},
		{map[string]string{"FARM_SCREENSHOT": "maybe"}, nil, "FARM_SCREENSHOT"},
		{map[string]string{"FARM_FOLLOW": long}, nil, "FARM_FOLLOW"},
		{map[string]string{"FARM_FOLLOW": "a", "FARM_FOLLOW_DEPTH": "99"}, nil, "FARM_FOLLOW_DEPTH"},
		{map[string]string{"FARM_FOLLOW": "a", "FARM_FOLLOW_MAX_LINKS": "99999"}, nil, "FARM_FOLLOW_MAX_LINKS"},
		{map[string]string{"FARM_FOLLOW_ANY_HOST": "maybe"}, nil, "FARM_FOLLOW_ANY_HOST"},
		// On the command line: the flag, not the variable.
		{nil, []string{"--cache", "forever"}, "(from --cache)"},
		// The line's own value: the line's, whatever the variable says.
		{map[string]string{"FARM_CACHE": "batch"}, []string{"-"}, ""},
	} {
		t.Run(strings.Join(append(slices.Sorted(maps.Keys(tc.env)), tc.args...), " "), func(t *testing.T) {
			env := map[string]string{"FARM_DATA_DIR": t.TempDir()}
			maps.Copy(env, tc.env)
			args := tc.args
			if len(args) == 0 || args[0] != "-" {
				args = append(args, "https://a.example/")
			}
			code, _, errOut := farmRun(t, `{"url":"https://a.example/","cache":"forever"}`, env, append([]string{"submit"}, args...)...)
			if code != exitUsage {
				t.Fatalf("exit %d, %.300q; want %d", code, errOut, exitUsage)
			}
			switch {
			case tc.want != "" && !strings.Contains(errOut, tc.want):
				t.Errorf("%.300q, want it to name %s", errOut, tc.want)
			case tc.want != "" && strings.HasPrefix(tc.want, "FARM_") && !strings.Contains(errOut, "set by "+tc.want) && !strings.Contains(errOut, tc.want+"="):
				t.Errorf("%.300q, want it to say %s set it", errOut, tc.want)
			case tc.want == "" && (strings.Contains(errOut, "FARM_") || strings.Contains(errOut, "(from --")):
				t.Errorf("%.300q: the line's own value blamed on a flag or variable", errOut)
			}
		})
	}
}

// A line's form: a byte-order mark ahead of it is dropped (an editor's, at
// a file's head), and a JSON array is refused as one, not read as a URL.
func TestReadSpecsLineForms(t *testing.T) {
	for _, tc := range []struct {
		name, in, url, err string
	}{
		{"a URL after a byte-order mark", "\ufeffhttps://a.example/\n", "https://a.example/", ""},
		{"a spec after a byte-order mark", "\ufeff{\"url\":\"https://a.example/\"}\n", "https://a.example/", ""},
		{"an array", "[{\"url\":\"https://a.example/\"}]\n", "", "jobs.txt line 1: a JSON array: give one JSON object (job spec) per line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			specs, _, err := readSpecs(strings.NewReader(tc.in), "jobs.txt", &specFlags{})
			switch {
			case tc.err != "" && (err == nil || err.Error() != tc.err):
				t.Errorf("err = %v, want %q", err, tc.err)
			case tc.err == "" && (err != nil || len(specs) != 1 || specs[0].URL != tc.url):
				t.Errorf("specs %+v, err %v; want one spec of %s", specs, err, tc.url)
			}
		})
	}
}

// '-' among the URLs reads stdin first, as --file - does; given with
// --file or twice it is refused.
func TestSubmitStdinArgument(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		code  int
		want  string
	}{
		{"stdin, then a URL", []string{"-", "https://a.example/"}, "not-a-url\n", exitUsage, "stdin line 1:"},
		{"a URL, then stdin", []string{"https://a.example/", "-"}, "not-a-url\n", exitUsage, "stdin line 1:"},
		{"stdin's lines are jobs", []string{"-", "not-a-url"}, "https://a.example/\n", exitUsage, "argument 2:"},
		{"twice", []string{"-", "-"}, "", exitUsage, "give one input to read"},
		{"beside --file", []string{"--file", "jobs.txt", "-"}, "", exitUsage, "give one input to read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"FARM_DATA_DIR": t.TempDir()} // no farm there: nothing is submitted
			code, _, errOut := farmRun(t, tc.stdin, env, append([]string{"submit"}, tc.args...)...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, %q; want %d and %q", code, errOut, tc.code, tc.want)
			}
		})
	}
}
