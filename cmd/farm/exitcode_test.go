package main

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The recycle exit code is defined once in Go (fleet.RecycleExitCode); the
// files that cannot import it spell it, and must spell that number: the
// systemd unit and EC2 user data (SuccessExitStatus, or every recycle counts
// as a failure), the README's exit-code table and every "exit N" in the
// deployment files' comments.
func TestRecycleExitCodeSpelledConsistently(t *testing.T) {
	code := fmt.Sprint(exitRecycle)
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, path := range []string{"../../scripts/farm-consumer.service", "../../scripts/ec2-user-data.sh"} {
		if s := read(path); !strings.Contains(s, "\nSuccessExitStatus="+code+"\n") {
			t.Errorf("%s: no SuccessExitStatus=%s", path, code)
		}
	}
	if !strings.Contains(read("../../README.md"), "\n| "+code+" | **recycle**") {
		t.Errorf("README.md: the exit-code table has no recycle row for %s", code)
	}
	// "exits 75", "exit 75", "exits with 75", "code 75" in prose.
	mention := regexp.MustCompile(`(?i)\b(?:exits?(?: with)?|code) (\d+)\b`)
	for _, path := range []string{"../../README.md", "../../Dockerfile", "../../scripts/farm-consumer.service",
		"../../scripts/ec2-user-data.sh", "../../deploy/kubernetes/20-consumer.yaml"} {
		for _, m := range mention.FindAllStringSubmatch(read(path), -1) {
			if n := m[1]; len(n) == 2 && n != code && n != fmt.Sprint(exitUsage) {
				t.Errorf("%s: %q names a two-digit exit code other than %s and %d", path, m[0], code, exitUsage)
			}
		}
	}
}

// TestSystemdUnitsRespawn: systemd's RestartSec delays every restart it
// makes, recycles too, so the systemd unit and the EC2 user data run the
// consumer under its respawn parent (which restarts it in place at once,
// the successor standing by), restart the parent only on failure, and not
// on a bad configuration.
func TestSystemdUnitsRespawn(t *testing.T) {
	for _, path := range []string{"../../scripts/farm-consumer.service", "../../scripts/ec2-user-data.sh"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range []string{"Environment=FARM_RESPAWN=true", "Restart=on-failure", fmt.Sprintf("RestartPreventExitStatus=%d", exitUsage)} {
			if !strings.Contains(string(b), "\n"+line+"\n") {
				t.Errorf("%s: no %s", path, line)
			}
		}
	}
}

// TestEC2UserDataUnitIsTheSystemdUnit: the EC2 user data writes the
// systemd unit from a copy of its own (it runs on an instance without the
// repository), which must be the unit, hardening and memory limit included,
// not a drifting variant of it.
func TestEC2UserDataUnitIsTheSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile("../../scripts/farm-consumer.service")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../../scripts/ec2-user-data.sh")
	if err != nil {
		t.Fatal(err)
	}
	const open = "cat > /etc/systemd/system/farm-consumer.service <<'UNIT'\n"
	_, copied, ok := strings.Cut(string(data), open)
	if !ok {
		t.Fatalf("ec2-user-data.sh writes no farm-consumer.service (%q)", open)
	}
	copied, _, ok = strings.Cut(copied, "\nUNIT\n")
	if !ok {
		t.Fatal("ec2-user-data.sh: the unit's here-document does not end")
	}
	want := string(unit[strings.Index(string(unit), "[Unit]"):])
	if strings.TrimSpace(copied) != strings.TrimSpace(want) {
		t.Errorf("ec2-user-data.sh's unit differs from scripts/farm-consumer.service from [Unit] on; it should read:\n%s", want)
	}
}

// TestDeploymentsInstallTheSameFonts: the image and the EC2 user data
// install the same fonts, or a page's text (CJK, emoji) renders as boxes in
// one path's screenshots and not the other's. (scripts/setup.sh, for
// development and the tests, installs fonts-liberation only.)
func TestDeploymentsInstallTheSameFonts(t *testing.T) {
	fonts := func(path string) []string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range regexp.MustCompile(`(?m)\b(fonts-[a-z0-9-]+)`).FindAllString(string(b), -1) {
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
		slices.Sort(out)
		return out
	}
	image, ec2 := fonts("../../Dockerfile"), fonts("../../scripts/ec2-user-data.sh")
	if len(image) == 0 || !slices.Equal(image, ec2) {
		t.Errorf("fonts: the image installs %v, the EC2 user data %v", image, ec2)
	}
}
