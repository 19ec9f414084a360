package jobqueue

import (
	"strings"
	"testing"
)

func TestNodeIDFrom(t *testing.T) {
	for _, tc := range []struct{ name, suffix, want string }{
		{"ip-10-0-1-23.ec2.internal", "", "ip-10-0-1-23.ec2.internal"},
		{"worker_7:a", "-1", "worker_7:a-1"},
		{"my host/ü", "", "my-host--"},
		{"-._:leading", "", "leading"},
		{"", "-3", "node-3"},
		{"---", "", "node"},
		{strings.Repeat("h", 60), "-10", strings.Repeat("h", 43) + "-10"},
	} {
		got := NodeIDFrom(tc.name, tc.suffix)
		if got != tc.want {
			t.Errorf("NodeIDFrom(%q, %q) = %q, want %q", tc.name, tc.suffix, got, tc.want)
		}
		if err := ValidateNodeID(got); err != nil {
			t.Errorf("NodeIDFrom(%q, %q) = %q breaks the rule: %v", tc.name, tc.suffix, got, err)
		}
	}
	for _, bad := range []string{"", "-a", ".a", "_a", ":a", "a b", "a/b", "é", strings.Repeat("a", MaxNodeIDLength+1)} {
		if ValidateNodeID(bad) == nil {
			t.Errorf("ValidateNodeID(%q) = nil, want an error", bad)
		}
	}
	if ValidateNodeID(strings.Repeat("a", MaxNodeIDLength)) != nil {
		t.Errorf("a node id of MaxNodeIDLength is refused")
	}
}

func TestDecodeSpec(t *testing.T) {
	if s, err := DecodeSpec([]byte(` {"url": "https://a.example/", "priority": 3} `)); err != nil || s.URL != "https://a.example/" || s.Priority != 3 {
		t.Fatalf("DecodeSpec = %+v, %v", s, err)
	}
	for _, tc := range []struct{ in, field, msg string }{
		{`{"url": "https://a.example/", "colour": "red"}`, "colour", "unknown field"},
		{`{"url": 5}`, "url", "expected a string, got JSON number"},
		{`{"viewport": {"width": "wide"}}`, "viewport.width", "expected a number"},
		{`{"url": "https://a.example/",}`, "", "malformed JSON at byte"},
		{`{"url": "https://a.example/"`, "", "unexpected end of input"},
		{`{"url": "https://a.example/"} {"url": "https://b.example/"}`, "", "more than one value"},
		{`["https://a.example/"]`, "", "must be a JSON object"},
		{``, "", "must be a JSON object"},
	} {
		_, err := DecodeSpec([]byte(tc.in))
		se, ok := err.(*SpecError)
		if !ok || se.Field != tc.field || !strings.Contains(se.Msg, tc.msg) || se.Index != -1 {
			t.Errorf("DecodeSpec(%s) = %#v, want field %q and a message containing %q", tc.in, err, tc.field, tc.msg)
		}
	}
}
