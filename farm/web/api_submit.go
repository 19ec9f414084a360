package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"

	"github.com/browserfarm/browserfarm/jobqueue"
)

// TooLarge says that what is over limit bytes: the API's words for a
// request body past MaxBodyBytes, and farm submit's for a line of its input
// past the same bound, so that both say the same of the same mistake.
func TooLarge(what string, limit int64) string {
	return fmt.Sprintf("%s is larger than %d bytes", what, limit)
}

// readBody reads a request body of at most MaxBodyBytes; on failure it has
// answered already.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge,
			TooLarge("request body", s.cfg.MaxBodyBytes)+"; submit big batches in several calls")
		return nil, false
	case err != nil:
		writeError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return nil, false
	}
	return body, true
}

// specParseError is a submitted batch that is not JSON of the right shape.
type specParseError struct {
	index int // -1: the batch as a whole
	field string
	msg   string
}

func (e *specParseError) Error() string {
	switch {
	case e.index < 0:
		return e.msg
	case e.field != "":
		return fmt.Sprintf("job %d: field %q: %s", e.index, e.field, e.msg)
	}
	return fmt.Sprintf("job %d: %s", e.index, e.msg)
}

// decodeStrict decodes exactly one JSON value into v, refusing unknown
// fields (a misspelt option must not be silently ignored) and trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

// parseSpecs reads a submission: a JSON array of specs, or {"jobs": [...]}.
func parseSpecs(body []byte) ([]jobqueue.Spec, error) {
	body = bytes.TrimSpace(body)
	var items []json.RawMessage
	switch {
	case len(body) == 0:
		return nil, &specParseError{index: -1, msg: "empty body: send a JSON array of job specs, or {\"jobs\": [...]}"}
	case body[0] == '[':
		if err := decodeStrict(body, &items); err != nil {
			_, msg := jobqueue.DescribeJSONError(err)
			return nil, &specParseError{index: -1, msg: msg}
		}
	case body[0] == '{':
		var env struct {
			Jobs *[]json.RawMessage `json:"jobs"`
		}
		// Keys in exact case and given once, as in a spec.
		if e := jobqueue.CheckJSONKeys(body, reflect.TypeOf(env)); e != nil {
			return nil, &specParseError{index: -1, msg: fmt.Sprintf("field %q: %s (the body is {\"jobs\": [...]})", e.Field, e.Msg)}
		}
		if err := decodeStrict(body, &env); err != nil {
			field, msg := jobqueue.DescribeJSONError(err)
			if field != "" {
				msg = fmt.Sprintf("field %q: %s (the body is {\"jobs\": [...]})", field, msg)
			}
			return nil, &specParseError{index: -1, msg: msg}
		}
		if env.Jobs == nil {
			return nil, &specParseError{index: -1, msg: "missing \"jobs\": send {\"jobs\": [...]} or a JSON array of job specs"}
		}
		items = *env.Jobs
	default:
		return nil, &specParseError{index: -1, msg: "the body is not JSON: send a JSON array of job specs, or {\"jobs\": [...]}"}
	}
	if len(items) == 0 {
		return nil, &specParseError{index: -1, msg: "no jobs in the batch"}
	}
	if len(items) > jobqueue.MaxEnqueue {
		return nil, &specParseError{index: -1, msg: fmt.Sprintf("%d jobs in one batch; at most %d are allowed", len(items), jobqueue.MaxEnqueue)}
	}
	specs := make([]jobqueue.Spec, len(items))
	for i, raw := range items {
		spec, err := jobqueue.DecodeSpec(raw)
		if se := (*jobqueue.SpecError)(nil); errors.As(err, &se) {
			return nil, &specParseError{index: i, field: se.Field, msg: se.Msg}
		}
		specs[i] = spec
	}
	return specs, nil
}

func (s *server) submit(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	specs, err := parseSpecs(body)
	if err != nil {
		var pe *specParseError
		errors.As(err, &pe)
		e := apiError{Error: err.Error(), Field: pe.field}
		if pe.index >= 0 {
			e.Index = &pe.index
		}
		writeJSON(w, http.StatusBadRequest, e)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	batch, ids, err := s.q.Enqueue(ctx, specs)
	var se *jobqueue.SpecError
	if errors.As(err, &se) {
		e := apiError{Error: se.Error(), Field: se.Field}
		if se.Index >= 0 {
			e.Index = &se.Index
		}
		writeJSON(w, http.StatusBadRequest, e)
		return
	}
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	w.Header().Set("Location", fmt.Sprintf("/api/jobs?batch=%s", batch))
	writeJSON(w, http.StatusCreated, map[string]any{"batch_id": batch, "ids": ids, "count": len(ids)})
}
