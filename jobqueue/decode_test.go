package jobqueue

import (
	"errors"
	"strings"
	"testing"
)

// TestDecodeSpecStrictKeys: keys match fields in exact case, a key given
// twice is refused, and an unknown or mistyped field is named by its full
// path — where encoding/json alone took "URL" for url, let the last of two
// keys win, and named wait.selektor "selektor".
func TestDecodeSpecStrictKeys(t *testing.T) {
	const u = `"url":"https://a.example/"`
	for _, tc := range []struct {
		name, in, field, msg string // field "" and msg "": decodes
	}{
		{"unknown nested field", `{` + u + `,"wait":{"selektor":"#x"}}`, "wait.selektor", "unknown field"},
		{"unknown field in an array element", `{` + u + `,"actions":[{"type":"wait","ms":1},{"type":"wait","mss":1}]}`, "actions[1].mss", "unknown field"},
		{"key in another case", `{"URL":"https://a.example/"}`, "URL", `case-sensitive (did you mean "url"?)`},
		{"key in another case after the right one", `{` + u + `,"Url":"x"}`, "Url", `did you mean "url"?`},
		{"nested key in another case", `{` + u + `,"cookies":[{"name":"a","value":"b","Domain":"a.example"}]}`, "cookies[0].Domain", `did you mean "domain"?`},
		{"Kelvin sign folding to k", `{` + u + `,"bloc\u212a":[]}`, "bloc\u212a", `did you mean "block"?`},
		{"duplicate key", `{"url":"https://a.example/","url":"https://b.example/"}`, "url", "duplicate key"},
		{"duplicate nested key", `{` + u + `,"wait":{"selector":"#a","selector":"#b"}}`, "wait.selector", "duplicate key"},
		{"duplicate header", `{` + u + `,"headers":{"X":"1","X":"2"}}`, `headers["X"]`, "duplicate key"},
		{"mistyped field in an array element", `{` + u + `,"actions":[{"type":"wait","ms":"1"}]}`, "actions[0].ms", "expected a number, got JSON string"},
		{"fraction for a whole number", `{` + u + `,"viewport":{"width":1.5,"height":100}}`, "viewport.width", "whole number"},
		{"object for a string", `{` + u + `,"extract":{}}`, "extract", "expected a string, got JSON object"},
		{"every kind of field", `{` + u + `,"wait":{"selector":"#x","visible":true},"actions":[{"type":"click","selector":"a","times":2}],` +
			`"headers":{"X":"1","x":"2"},"viewport":null,"cookies":[],"follow":{"selector":"a","max_depth":1,"any_host":false}}`, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeSpec([]byte(tc.in))
			if tc.field == "" {
				if err != nil {
					t.Fatalf("DecodeSpec = %v, want it decoded", err)
				}
				return
			}
			var se *SpecError
			if !errors.As(err, &se) || se.Field != tc.field || !strings.Contains(se.Msg, tc.msg) {
				t.Fatalf("DecodeSpec = %v, want field %q with a message containing %q", err, tc.field, tc.msg)
			}
		})
	}
}

// TestDecodeSpecFields: the fields a spec names, by path, empty values
// and nested ones too, and none it leaves out.
func TestDecodeSpecFields(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{`{"url":"https://a.example/"}`, []string{"url"}},
		{`{"url":"https://a.example/","priority":0,"html":false,"wait":{"network_idle":false}}`,
			[]string{"url", "priority", "html", "wait", "wait.network_idle"}},
		{`{"url":"https://a.example/","wait":{"selector":"#a","visible":true},"headers":{"X-A":"1"},"follow":{"max_depth":2}}`,
			[]string{"url", "wait", "wait.selector", "wait.visible", "headers", "follow", "follow.max_depth"}},
	} {
		_, got, err := DecodeSpecFields([]byte(tc.in))
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s: fields %v, want %v", tc.in, got, tc.want)
		}
		for _, f := range tc.want {
			if !got[f] {
				t.Errorf("%s: fields %v lack %q", tc.in, got, f)
			}
		}
	}
}
