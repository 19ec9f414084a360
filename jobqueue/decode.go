package jobqueue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// DecodeSpec decodes one job spec from JSON: exactly one object, no unknown
// field (a misspelt option must not be silently ignored) and nothing after
// it. It is the one decoder of specs, shared by farm submit's JSON lines and
// POST /api/jobs, so both say the same of the same input. Its error is a
// *SpecError (Index -1) naming the field when the decoder knows it. It does
// not validate: Enqueue does.
func DecodeSpec(data []byte) (Spec, error) {
	var s Spec
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		return s, &SpecError{Index: -1, Msg: "a job spec must be a JSON object, e.g. {\"url\": \"https://example.com/\"}"}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		field, msg := DescribeJSONError(err)
		return Spec{}, &SpecError{Index: -1, Field: field, Msg: msg}
	}
	if _, err := dec.Token(); err != io.EOF {
		return Spec{}, &SpecError{Index: -1, Msg: "more than one value: unexpected data after the job spec"}
	}
	return s, nil
}

// DescribeJSONError turns an encoding/json decoding error into the JSON path
// of the offending field ("" when unknown) and a message for a person.
func DescribeJSONError(err error) (field, msg string) {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		return typeErr.Field, fmt.Sprintf("expected %s, got JSON %s", jsonTypeName(typeErr.Type.Kind().String()), typeErr.Value)
	case errors.As(err, &syntaxErr):
		return "", fmt.Sprintf("malformed JSON at byte %d: %v", syntaxErr.Offset, err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, uerr := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		if uerr != nil {
			name = strings.TrimPrefix(err.Error(), "json: unknown field ")
		}
		return name, "unknown field"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "", "malformed JSON: unexpected end of input"
	}
	return "", strings.TrimPrefix(err.Error(), "json: ")
}

func jsonTypeName(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"), strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "true or false"
	case kind == "slice":
		return "an array"
	case kind == "struct", kind == "map":
		return "an object"
	}
	return kind
}
