package procstat

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Proc
		wantErr bool
	}{
		{"plain", "42 (node) S 7 42 42 0 -1 0 0 0 0 0 150 30 5 2 20 0 1 0", Proc{PID: 42, PPID: 7, PGRP: 42, CPU: 180, ChildCPU: 7}, false},
		{"name with spaces and parens", "9 (a) b (c) R 1 9 9 0 -1 0 0 0 0 0 1 2 3 4 20", Proc{PID: 9, PPID: 1, PGRP: 9, CPU: 3, ChildCPU: 7}, false},
		{"zombie", "9 (x) Z 1 9 9 0 -1 0 0 0 0 0 1 2 3 4 20", Proc{}, true},
		{"short", "9 (x) R 1 9", Proc{}, true},
		{"no name", "garbage", Proc{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat(tt.want.PID, []byte(tt.in))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseStat(%q) = %+v, want an error", tt.in, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseStat(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestSelect(t *testing.T) {
	// 1 ─ 10 ─ 11 ─ 12, 10 ─ 13; 20 is another tree. 30 leads a marked
	// group (a Chrome) whose member 31 lost its parent to init (1), and 32
	// is its member's child in another group; 40 is marked but no leader.
	procs := []Proc{
		{PID: 1, PPID: 0, PGRP: 1}, {PID: 10, PPID: 1, PGRP: 10}, {PID: 11, PPID: 10, PGRP: 10},
		{PID: 12, PPID: 11, PGRP: 10}, {PID: 13, PPID: 10, PGRP: 10}, {PID: 20, PPID: 1, PGRP: 20},
		{PID: 30, PPID: 10, PGRP: 30, Marked: true}, {PID: 31, PPID: 1, PGRP: 30}, {PID: 32, PPID: 31, PGRP: 32},
		{PID: 40, PPID: 1, PGRP: 20, Marked: true},
	}
	pids := func(ps []Proc) []int {
		var out []int
		for _, p := range ps {
			out = append(out, p.PID)
		}
		slices.Sort(out)
		return out
	}
	tests := []struct {
		root int
		want []int
	}{
		{10, []int{10, 11, 12, 13, 30, 31, 32}},
		{11, []int{11, 12, 30, 31, 32}},
		{20, []int{20, 30, 31, 32}},
		{0, []int{30, 31, 32}},
		{99, []int{30, 31, 32}},
	}
	for _, tt := range tests {
		if got := pids(Select(procs, tt.root)); !slices.Equal(got, tt.want) {
			t.Errorf("Select(root %d) = %v, want %v", tt.root, got, tt.want)
		}
	}
}

func TestParseKB(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		err  bool
	}{
		{"   1234 kB", 1234 * 1024, false},
		{"0 kB", 0, false},
		{"12 MB", 0, true},
		{"x kB", 0, true},
		{"", 0, true},
	}
	for _, tc := range tests {
		got, err := parseKB(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseKB(%q) = %d, %v", tc.in, got, err)
		}
	}
}

// TestReadMemory reads this test process's own memory: PSS and RSS come
// from one smaps_rollup read, and a process's PSS never exceeds its RSS.
func TestReadMemory(t *testing.T) {
	pss, rss, err := ReadMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if pss == 0 || rss < pss {
		t.Fatalf("pss %d, rss %d: want 0 < pss <= rss", pss, rss)
	}
	if p, err := ReadPSS(os.Getpid()); err != nil || p == 0 {
		t.Fatalf("ReadPSS: %d, %v", p, err)
	}
	if _, _, err := ReadMemory(-1); err == nil {
		t.Fatal("ReadMemory of no process: no error")
	}
}

// TestSelfCPU: the process's own CPU time grows while it computes.
func TestSelfCPU(t *testing.T) {
	before := SelfCPU()
	x := 0
	for i := 0; SelfCPU()-before < 20*time.Millisecond; i++ {
		if i > 1e9 {
			t.Fatalf("SelfCPU stayed at %v after a billion steps", SelfCPU())
		}
		x += i % 7
	}
	if before <= 0 || x < 0 {
		t.Errorf("SelfCPU at start = %v, want > 0 (the test binary has run)", before)
	}
}

func TestParseMachine(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want Machine
		err  bool
	}{
		{"linux 6", "cpu  100 5 40 900 10 2 3 7 0 0\ncpu0 50 2 20 450 5 1 1 3 0 0\n",
			Machine{User: 105, Kernel: 45, Idle: 910, Steal: 7}, false},
		{"no newline", "cpu 1 2 3 4 5 6 7 8", Machine{User: 3, Kernel: 16, Idle: 9, Steal: 8}, false},
		{"too few fields", "cpu 1 2 3 4\n", Machine{}, true},
		{"not the cpu line", "intr 1 2 3 4 5 6 7 8 9\n", Machine{}, true},
		{"not a number", "cpu 1 2 x 4 5 6 7 8\n", Machine{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMachine([]byte(tc.in))
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("parseMachine(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.err)
			}
		})
	}
	a, err := ReadMachine()
	if err != nil {
		t.Fatal(err)
	}
	b, err := ReadMachine()
	if err != nil {
		t.Fatal(err)
	}
	if d := b.Sub(a); d.User > b.User || d.Kernel > b.Kernel || b.User+b.Kernel+b.Idle == 0 {
		t.Fatalf("ReadMachine went back or read nothing: %+v then %+v", a, b)
	}
}

// TestMeterStart: a started meter counts the CPU its process spends until
// stop, and stop returns only once the last sample is in: with an interval
// of an hour, the first and the last are the only ones.
func TestMeterStart(t *testing.T) {
	m := &Meter{Root: os.Getpid(), Interval: time.Hour}
	stop := m.Start(context.Background())
	spent := SelfCPU()
	for SelfCPU()-spent < 200*time.Millisecond {
	}
	stop()
	stop() // again: nothing more to do
	if got := m.Total(); got < 100*time.Millisecond {
		t.Errorf("Total %v after 200 ms of this process's CPU", got)
	}
}
