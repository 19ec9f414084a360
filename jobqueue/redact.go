package jobqueue

import (
	"net/url"
	"regexp"
	"strings"
)

// Redacted stands in for a secret in every read of the queue.
const Redacted = "redacted"

// A job's secrets — the userinfo of its URL and its proxy's password — are
// stored as submitted, because the node that renders the job needs them, and
// are handed out only by Claim. Every other read (Get, List, results,
// exports, failure groups, and through them the API, the dashboard and
// `farm results`) shows them redacted, error texts included.

// userinfoRE finds the userinfo of URLs inside free text (error messages,
// console lines): scheme://userinfo@.
var userinfoRE = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\s"'<>]*@`)

// RedactText replaces the userinfo of every URL in s, and each of the given
// secrets, with Redacted.
func RedactText(s string, secrets ...string) string {
	for _, sec := range secrets {
		if len(sec) >= 3 {
			s = strings.ReplaceAll(s, sec, Redacted)
		}
	}
	if !strings.Contains(s, "@") {
		return s
	}
	return userinfoRE.ReplaceAllString(s, "${1}"+Redacted+"@")
}

// redactURL replaces the userinfo of a URL: all of it for a page URL (a
// token in the user part is as secret as a password), only the password
// for a proxy (keepUser), whose user name says which account is used.
func redactURL(raw string, keepUser bool) string {
	u, err := url.Parse(raw)
	if err != nil {
		return RedactText(raw)
	}
	if u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); keepUser && has {
		u.User = url.UserPassword(u.User.Username(), Redacted)
	} else if !keepUser {
		u.User = url.User(Redacted)
	}
	return u.String()
}

// Secrets lists the secret strings of a spec, for RedactText.
func (s *Spec) Secrets() []string {
	var out []string
	add := func(raw string) {
		u, err := url.Parse(raw)
		if err != nil || u.User == nil {
			return
		}
		if p, ok := u.User.Password(); ok {
			out = append(out, p, url.QueryEscape(p))
		} else {
			out = append(out, u.User.Username())
		}
	}
	add(s.URL)
	add(s.Proxy)
	return out
}

// redacted returns the spec as reads show it.
func (s Spec) redacted() Spec {
	s.URL = redactURL(s.URL, false)
	if s.Proxy != "" {
		s.Proxy = redactURL(s.Proxy, true)
	}
	return s
}

// redact rewrites a job read for anyone but its node.
func (j *Job) redact() {
	secrets := j.Spec.Secrets()
	j.Spec = j.Spec.redacted()
	j.LastError = RedactText(j.LastError, secrets...)
}

// redact rewrites a result read: a final URL or console line may carry the
// userinfo of the job's URL.
func (r *Result) redact() {
	r.FinalURL = RedactText(r.FinalURL)
	for i, line := range r.ConsoleErrors {
		r.ConsoleErrors[i] = RedactText(line)
	}
}
