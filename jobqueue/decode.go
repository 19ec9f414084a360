package jobqueue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// DecodeSpec decodes one job spec from JSON: exactly one object, no unknown
// field (a misspelt option must not be silently ignored), every key in the
// exact case of its field and given once, and nothing after it. It is the one decoder of specs, shared by farm submit's JSON lines and
// POST /api/jobs, so both say the same of the same input. Its error is a
// *SpecError (Index -1) naming the field when the decoder knows it. It does
// not validate: Enqueue does.
func DecodeSpec(data []byte) (Spec, error) {
	return decodeSpec(data, nil)
}

// DecodeSpecFields is DecodeSpec that also says which fields the JSON
// names, by their paths ("priority", "wait.selector"), the empty value
// too: farm submit's flags fill only the fields a line leaves out.
func DecodeSpecFields(data []byte) (Spec, map[string]bool, error) {
	given := map[string]bool{}
	s, err := decodeSpec(data, given)
	if err != nil {
		return s, nil, err
	}
	return s, given, nil
}

// decodeSpec is DecodeSpec, recording the fields named in given (if not
// nil).
func decodeSpec(data []byte, given map[string]bool) (Spec, error) {
	var s Spec
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		return s, &SpecError{Index: -1, Msg: "a job spec must be a JSON object, e.g. {\"url\": \"https://example.com/\"}"}
	}
	// encoding/json matches keys to fields case-insensitively, lets the
	// last of two equal keys win and names a nested unknown field without
	// its path: a walk over the tokens first refuses all three, with the
	// field's full path (encoding/json/v2, which could, needs
	// GOEXPERIMENT=jsonv2 in Go 1.26).
	if e := checkJSONKeys(data, specType, given); e != nil {
		return Spec{}, e
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

var specType = reflect.TypeFor[Spec]()

// CheckJSONKeys walks JSON's tokens along the type t (a Spec, or the API's
// envelope of specs, whose json.RawMessage values — the specs, which
// DecodeSpec checks one by one — it skips): every object key of a struct
// must be one of its fields' JSON names in exact case, no object may give
// a key twice, and every value must have its field's JSON type. The error
// names the offending field by its path ("wait.selektor", "actions[0].ms",
// `headers["X"]`). Malformed JSON is left to the decoder, which describes
// it.
func CheckJSONKeys(data []byte, t reflect.Type) *SpecError {
	return checkJSONKeys(data, t, nil)
}

// checkJSONKeys is CheckJSONKeys that records in given (if not nil) the
// path of every struct field the JSON names.
func checkJSONKeys(data []byte, t reflect.Type, given map[string]bool) *SpecError {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	w := keyWalker{dec: dec, given: given}
	e := w.value(t, "")
	if w.syntax {
		return nil
	}
	return e
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

type keyWalker struct {
	dec   *json.Decoder
	given map[string]bool // nil: not recorded
	// syntax: the walk stopped at malformed JSON.
	syntax bool
}

func (w *keyWalker) token() (json.Token, bool) {
	tok, err := w.dec.Token()
	if err != nil {
		w.syntax = true
		return nil, false
	}
	return tok, true
}

// value checks the next value against t, at path.
func (w *keyWalker) value(t reflect.Type, path string) *SpecError {
	if t == rawMessageType {
		var skip json.RawMessage
		if w.dec.Decode(&skip) != nil {
			w.syntax = true
		}
		return nil
	}
	tok, ok := w.token()
	if !ok {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if tok == nil {
		return nil // null leaves the field as it is, as encoding/json does
	}
	want := ""
	switch t.Kind() {
	case reflect.Struct:
		if tok != json.Delim('{') {
			want = "an object"
			break
		}
		fields := jsonFields(t)
		return w.object(path, func(key string) (reflect.Type, string, *SpecError) {
			kpath := key
			if path != "" {
				kpath = path + "." + key
			}
			if ft, ok := fields[key]; ok {
				if w.given != nil {
					w.given[kpath] = true
				}
				return ft, kpath, nil
			}
			for name := range fields {
				if strings.EqualFold(name, key) {
					return nil, kpath, &SpecError{Index: -1, Field: kpath, Msg: fmt.Sprintf("unknown field: keys are case-sensitive (did you mean %q?)", name)}
				}
			}
			return nil, kpath, &SpecError{Index: -1, Field: kpath, Msg: "unknown field"}
		})
	case reflect.Map:
		if tok != json.Delim('{') {
			want = "an object"
			break
		}
		return w.object(path, func(key string) (reflect.Type, string, *SpecError) {
			return t.Elem(), fmt.Sprintf("%s[%q]", path, key), nil
		})
	case reflect.Slice:
		if tok != json.Delim('[') {
			want = "an array"
			break
		}
		for i := 0; w.dec.More(); i++ {
			if e := w.value(t.Elem(), fmt.Sprintf("%s[%d]", path, i)); e != nil || w.syntax {
				return e
			}
		}
		w.token() // ]
		return nil
	case reflect.String:
		if _, ok := tok.(string); !ok {
			want = "a string"
		}
	case reflect.Bool:
		if _, ok := tok.(bool); !ok {
			want = "true or false"
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := tok.(json.Number)
		if !ok {
			want = "a number"
			break
		}
		if _, err := strconv.ParseInt(string(n), 10, t.Bits()); err != nil {
			return &SpecError{Index: -1, Field: path, Msg: fmt.Sprintf("expected a whole number within range, got %s", n)}
		}
	}
	if want != "" {
		return &SpecError{Index: -1, Field: path, Msg: fmt.Sprintf("expected %s, got JSON %s", want, jsonKind(tok))}
	}
	return nil
}

// object walks the members of an object whose { was read: field maps a key
// to its value's type and path, or refuses it.
func (w *keyWalker) object(path string, field func(key string) (reflect.Type, string, *SpecError)) *SpecError {
	seen := map[string]bool{}
	for w.dec.More() {
		tok, ok := w.token()
		if !ok {
			return nil
		}
		key, _ := tok.(string)
		t, kpath, e := field(key)
		if seen[key] {
			return &SpecError{Index: -1, Field: kpath, Msg: "duplicate key: it is given more than once"}
		}
		seen[key] = true
		if e != nil {
			return e
		}
		if e := w.value(t, kpath); e != nil || w.syntax {
			return e
		}
	}
	w.token() // }
	return nil
}

// fieldsOf caches jsonFields by type: reflecting over a struct's fields
// for every object decoded was a quarter of farm submit's parsing (16 µs a
// line) and of each spec POST /api/jobs decodes.
var fieldsOf sync.Map // reflect.Type → map[string]reflect.Type, never written after it is stored

// jsonFields maps the JSON names of a struct's fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldsOf.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m, _ := fieldsOf.LoadOrStore(t, structFields(t))
	return m.(map[string]reflect.Type)
}

func structFields(t reflect.Type) map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	return m
}

func jsonKind(tok json.Token) string {
	switch tok.(type) {
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "bool"
	case json.Delim:
		if tok == json.Delim('[') {
			return "array"
		}
		return "object"
	}
	return "null"
}
