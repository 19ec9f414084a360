package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEConfigurationTables: the README's configuration tables are
// `farm <command> --help` as Markdown, row for row.
func TestREADMEConfigurationTables(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	flagLine := regexp.MustCompile(`(?m)^  --([a-z0-9-]+)  \[([^\]]*)\](?: \(default (.*?)\))?\n      (.*)$`)
	for _, cmd := range []string{"up", "producer", "consumer", "submit", "results"} {
		_, _, help := farmRun(t, "", nil, cmd, "--help")
		want := []string{"| flag | environment | default | meaning |", "|---|---|---|---|"}
		for _, m := range flagLine.FindAllStringSubmatch(help, -1) {
			env, def := m[2], m[3]
			if strings.HasPrefix(env, "FARM_") {
				env = "`" + env + "`"
			}
			if def != "" {
				def = "`" + def + "`"
			}
			want = append(want, "| `--"+m[1]+"` | "+env+" | "+def+" | "+m[4]+" |")
		}
		head := "#### `farm " + cmd + "`\n\n"
		i := strings.Index(readme, head)
		if i < 0 {
			t.Errorf("README.md has no %q section", strings.TrimSpace(head))
			continue
		}
		table := readme[i+len(head):]
		table = table[:strings.Index(table, "\n\n")]
		if got := strings.Split(table, "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("README.md's farm %s table differs from --help; it should read:\n%s", cmd, strings.Join(want, "\n"))
		}
	}
}
