package jobqueue

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Redacted stands in for a secret in every read of the queue.
const Redacted = "redacted"

// A job's secrets — the userinfo of its URL, its proxy's password (or its
// user name when it has no password: an API key), its cookies' values and
// the values of its headers whose names say they carry credentials — are
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
	if p, has := u.User.Password(); keepUser && has && p != "" {
		u.User = url.UserPassword(u.User.Username(), Redacted)
	} else {
		// A proxy's user name without a password is its key.
		u.User = url.User(Redacted)
	}
	return u.String()
}

// secretHeader reports whether a request header carries a credential, by
// its name.
func secretHeader(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"auth", "cookie", "token", "key", "secret", "session", "password", "passwd", "credential", "signature"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// Secrets lists the secret strings of a spec, for RedactText.
func (s *Spec) Secrets() []string {
	var out []string
	add := func(raw string) {
		u, err := url.Parse(raw)
		if err != nil || u.User == nil {
			return
		}
		if p, ok := u.User.Password(); ok && p != "" {
			out = append(out, p, url.QueryEscape(p))
		} else {
			out = append(out, u.User.Username())
		}
	}
	add(s.URL)
	add(s.Proxy)
	for name, v := range s.Headers {
		if secretHeader(name) {
			// And the credential of a scheme's ("Bearer …").
			_, cred, _ := strings.Cut(v, " ")
			out = append(out, v, cred)
		}
	}
	for _, c := range s.Cookies {
		out = append(out, c.Value)
	}
	return out
}

// redacted returns the spec as reads show it.
func (s Spec) redacted() Spec {
	s.URL = redactURL(s.URL, false)
	if s.Proxy != "" {
		s.Proxy = redactURL(s.Proxy, true)
	}
	if len(s.Headers) > 0 {
		h := make(map[string]string, len(s.Headers))
		for name, v := range s.Headers {
			if secretHeader(name) {
				v = Redacted
			}
			h[name] = v
		}
		s.Headers = h
	}
	if len(s.Cookies) > 0 {
		s.Cookies = slices.Clone(s.Cookies)
		for i := range s.Cookies {
			s.Cookies[i].Value = Redacted
		}
	}
	return s
}

// redact rewrites a job read for anyone but its node.
func (j *Job) redact() {
	secrets := j.Spec.Secrets()
	j.Spec = j.Spec.redacted()
	j.LastError = RedactText(j.LastError, secrets...)
}

// redact rewrites a result read: a final URL, a console line or a link the
// page had may carry the userinfo of the job's URL (Chrome keeps it in the
// page's address, so a relative link resolves with it).
func (r *Result) redact() {
	r.FinalURL = RedactText(r.FinalURL)
	for i, line := range r.ConsoleErrors {
		r.ConsoleErrors[i] = RedactText(line)
	}
	for i, link := range r.Links {
		r.Links[i] = RedactText(link)
	}
}
