package web

// Who may read and who may change: open reads only for direct requests to
// a loopback name, else the read or API token; changes with the API token.

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/browserfarm/browserfarm/internal/loopback"
)

// reading guards a read endpoint when ReadAuth is on: the read token or the
// API token must be presented.
func (s *server) reading(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.cfg.ReadAuth {
			// Open reads are for a producer on loopback, and only for
			// requests that name it so: a page the operator visits could
			// point its own host name at 127.0.0.1 (DNS rebinding) and read
			// every job through the operator's browser, which would send
			// that name as the Host.
			if !loopback.Host(r.Host) {
				writeError(w, http.StatusForbidden,
					"reads without a token answer requests to localhost or a loopback address only; set FARM_READ_TOKEN to read through another name")
				return
			}
			// A reverse proxy on the same machine connects from loopback,
			// and may pass on a loopback Host: its clients are anyone's.
			// Best effort: only a proxy that says so is seen (a token is
			// the boundary); a request through it with the API token is
			// the operator's.
			if hdr := proxyHeader(r.Header); hdr != "" && !s.bearerIsAPIToken(r) {
				writeError(w, http.StatusForbidden,
					"reads without a token answer direct requests only, and this one came through a proxy ("+hdr+"); set FARM_READ_TOKEN")
				return
			}
			h(w, r)
			return
		}
		if s.cfg.Token == "" && s.cfg.ReadToken == "" {
			writeError(w, http.StatusForbidden,
				"reads are disabled: this producer listens beyond loopback; set FARM_READ_TOKEN (or FARM_API_TOKEN) and send it as 'Authorization: Bearer <token>'")
			return
		}
		got, ok := bearer(w, r, "FARM_READ_TOKEN")
		if !ok {
			return
		}
		okRead := s.cfg.ReadToken != "" && subtle.ConstantTimeCompare(got[:], s.readHash[:]) == 1
		okAPI := s.isAPIToken(got)
		if !okRead && !okAPI {
			w.Header().Set("WWW-Authenticate", `Bearer realm="browserfarm", error="invalid_token"`)
			writeError(w, http.StatusUnauthorized, "wrong bearer token")
			return
		}
		h(w, r)
	}
}

// bearerIsAPIToken reports whether r carries the API token.
func (s *server) bearerIsAPIToken(r *http.Request) bool {
	got, ok := bearerHash(r)
	return ok && s.isAPIToken(got)
}

// isAPIToken reports whether a bearer token's hash is the API token's.
func (s *server) isAPIToken(got [sha256.Size]byte) bool {
	return s.cfg.Token != "" && subtle.ConstantTimeCompare(got[:], s.tokenHash[:]) == 1
}

// proxyHeaders are the headers a reverse proxy adds to say whom it
// forwards for (RFC 7239 and the de facto ones).
var proxyHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-Ip", "Via"}

// proxyHeader returns the first of proxyHeaders that h holds, or "".
func proxyHeader(h http.Header) string {
	for _, k := range proxyHeaders {
		if _, ok := h[k]; ok {
			return k
		}
	}
	return ""
}

// bearer returns the hash of the request's bearer token, or answers 401
// naming the variable whose token to send.
func bearer(w http.ResponseWriter, r *http.Request, variable string) ([sha256.Size]byte, bool) {
	got, ok := bearerHash(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="browserfarm"`)
		writeError(w, http.StatusUnauthorized, "missing bearer token: send 'Authorization: Bearer <"+variable+">'")
	}
	return got, ok
}

// bearerHash returns the hash of the request's bearer token, if it has one.
// Comparing hashes keeps the comparison constant-time in the token's
// length too.
func bearerHash(r *http.Request) ([sha256.Size]byte, bool) {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return [sha256.Size]byte{}, false
	}
	return sha256.Sum256([]byte(strings.TrimSpace(token))), true
}

// mutating guards a handler that changes the farm: a token must be
// configured and presented, and this producer must be the leader.
func (s *server) mutating(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Token == "" {
			writeError(w, http.StatusForbidden,
				"mutating API calls are disabled: set FARM_API_TOKEN on the producer and send it as 'Authorization: Bearer <token>'")
			return
		}
		got, ok := bearer(w, r, "FARM_API_TOKEN")
		if !ok {
			return
		}
		if !s.isAPIToken(got) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="browserfarm", error="invalid_token"`)
			writeError(w, http.StatusUnauthorized, "wrong bearer token")
			return
		}
		if !s.leader() {
			w.Header().Set("Retry-After", "5")
			writeError(w, http.StatusServiceUnavailable,
				"this producer is a standby and serves read-only; send mutating calls to the leader (its /readyz says \"leader\": true)")
			return
		}
		h(w, r)
	}
}
