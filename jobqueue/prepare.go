package jobqueue

import (
	"encoding/json"
	"fmt"
	"time"
)

// WithDefaults returns s with zero fields that have a default filled in:
// timeout_ms, max_attempts, follow.max_depth and follow.max_links. The queue
// stores specs this way, so a consumer reads the effective values.
func (s Spec) WithDefaults() Spec {
	if s.TimeoutMS == 0 {
		s.TimeoutMS = DefaultTimeoutMS
	}
	if s.MaxAttempts == 0 {
		s.MaxAttempts = DefaultAttempts
	}
	if s.Follow != nil && (s.Follow.MaxDepth == 0 || s.Follow.MaxLinks == 0) {
		f := *s.Follow
		if f.MaxDepth == 0 {
			f.MaxDepth = DefaultFollowDepth
		}
		if f.MaxLinks == 0 {
			f.MaxLinks = DefaultMaxLinks
		}
		s.Follow = &f
	}
	return s
}

// Timeout is the effective render timeout of s.
func (s *Spec) Timeout() time.Duration {
	if s.TimeoutMS == 0 {
		return DefaultTimeoutMS * time.Millisecond
	}
	return time.Duration(s.TimeoutMS) * time.Millisecond
}

// preparedSpec is a validated spec ready for insertion.
type preparedSpec struct {
	json     []byte
	host     string
	dedupKey *string // set for crawl roots (spec.follow)
	priority int
	attempts int
}

// prepare validates s, applies defaults and encodes it. The error is a
// *SpecError carrying index.
func prepare(index int, s Spec) (preparedSpec, error) {
	if e := s.validate(); e != nil {
		e.Index = index
		return preparedSpec{}, e
	}
	u, _ := ParseJobURL(s.URL)
	s = s.WithDefaults()
	b, err := json.Marshal(s)
	if err != nil {
		return preparedSpec{}, &SpecError{Index: index, Field: "", Msg: "cannot encode: " + err.Error()}
	}
	if len(b) > MaxSpecBytes {
		return preparedSpec{}, &SpecError{Index: index, Field: "(spec)",
			Msg: fmt.Sprintf("the spec is %d bytes as JSON; at most %d are allowed", len(b), MaxSpecBytes)}
	}
	p := preparedSpec{json: b, host: HostKey(u), priority: s.Priority, attempts: s.MaxAttempts}
	if s.Follow != nil {
		k := DedupKey(u)
		p.dedupKey = &k
	}
	return p, nil
}
