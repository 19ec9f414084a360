// Package procstat reads what is measured of processes from /proc: CPU time,
// process groups, Chrome trees by profile directory, and PSS. The benchmark
// harnesses under internal/ use all of it; the browser package reads its
// Chrome tree's PSS with ReadPSS, the one PSS reader. It imports nothing of
// the project, so browser, which imports nothing else of the project, stays
// a leaf of the import graph.
package procstat

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat: USER_HZ, 100 on
// every Linux architecture the farm runs on.
const userHZ = 100

// Ticks converts /proc CPU ticks to a duration.
func Ticks(t uint64) time.Duration { return time.Duration(t) * time.Second / userHZ }

// Proc is what the harnesses read of one live process.
type Proc struct {
	PID, PPID, PGRP int
	// CPU is utime + stime: the process's own CPU so far, in ticks.
	CPU uint64
	// ChildCPU is cutime + cstime: the CPU of the children it reaped.
	ChildCPU uint64
	// Marked: its command line contains the marker given to Scan.
	Marked bool
}

// ParseStat reads a /proc/PID/stat text. The command name may hold spaces
// and parentheses, so the fields are counted from its last ')'.
func ParseStat(pid int, data []byte) (Proc, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return Proc{}, fmt.Errorf("stat: no command name in %q", data)
	}
	// After the name: state ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime …
	f := strings.Fields(string(data[i+2:]))
	if len(f) < 15 {
		return Proc{}, fmt.Errorf("stat: %d fields after the command name, want ≥ 15", len(f))
	}
	if f[0] == "Z" || f[0] == "X" {
		return Proc{}, fmt.Errorf("stat: process %d is a zombie", pid)
	}
	p := Proc{PID: pid}
	var err error
	if p.PPID, err = strconv.Atoi(f[1]); err != nil {
		return Proc{}, fmt.Errorf("stat: ppid %q: %w", f[1], err)
	}
	if p.PGRP, err = strconv.Atoi(f[2]); err != nil {
		return Proc{}, fmt.Errorf("stat: pgrp %q: %w", f[2], err)
	}
	var t [4]uint64
	for k, v := range f[11:15] {
		if t[k], err = strconv.ParseUint(v, 10, 64); err != nil {
			return Proc{}, fmt.Errorf("stat: cpu time %q: %w", v, err)
		}
	}
	p.CPU, p.ChildCPU = t[0]+t[1], t[2]+t[3]
	return p, nil
}

// Scan lists the live processes; Marked is set for those whose command line
// contains marker ("" marks none).
func Scan(marker string) []Proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []Proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		p, err := ParseStat(pid, data)
		if err != nil {
			continue
		}
		if marker != "" {
			if cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil {
				p.Marked = bytes.Contains(cmd, []byte(marker))
			}
		}
		out = append(out, p)
	}
	return out
}

// ProfileMarker is the command-line text of a Chrome whose profile lies
// under root.
func ProfileMarker(root string) string { return "--user-data-dir=" + root }

// Select picks from procs the descendants of root (root included; 0 for
// none) and every process in the group of a marked group leader (Chrome runs
// in a process group of its own, led by its main process, and its helpers
// stay in it, also when the main process dies first), with their
// descendants.
func Select(procs []Proc, root int) []Proc {
	leaders := map[int]bool{}
	children := map[int][]int{}
	byPID := make(map[int]Proc, len(procs))
	for _, p := range procs {
		byPID[p.PID] = p
		children[p.PPID] = append(children[p.PPID], p.PID)
		if p.Marked && p.PGRP == p.PID {
			leaders[p.PID] = true
		}
	}
	seen := map[int]bool{}
	var stack []int
	if root != 0 {
		stack = append(stack, root)
	}
	for _, p := range procs {
		if leaders[p.PGRP] {
			stack = append(stack, p.PID)
		}
	}
	var out []Proc
	for len(stack) > 0 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		if p, ok := byPID[pid]; ok {
			out = append(out, p)
		}
		stack = append(stack, children[pid]...)
	}
	return out
}

// ChromeTrees maps the main pid of every Chrome whose profile lies under
// root to the pids of its process group.
func ChromeTrees(root string) map[int][]int {
	procs := Scan(ProfileMarker(root))
	trees := map[int][]int{}
	for _, p := range Select(procs, 0) {
		trees[p.PGRP] = append(trees[p.PGRP], p.PID)
	}
	return trees
}

// ReadPSS reads a process's proportional set size in bytes from the Pss line
// of /proc/PID/smaps_rollup: each shared page divided among the processes
// that map it, so that a tree's sum counts Chrome's shared pages once.
func ReadPSS(pid int) (uint64, error) {
	pss, _, err := ReadMemory(pid)
	return pss, err
}

// ReadMemory reads a process's PSS and RSS in bytes from one read of
// /proc/PID/smaps_rollup (the kernel walks the process's page tables for
// it: the costly part of a memory sample).
func ReadMemory(pid int) (pss, rss uint64, err error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var havePSS bool
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "Rss:"); ok {
			if rss, err = parseKB(rest); err != nil {
				return 0, 0, err
			}
		} else if rest, ok := strings.CutPrefix(line, "Pss:"); ok {
			if pss, err = parseKB(rest); err != nil {
				return 0, 0, err
			}
			havePSS = true
			break // Rss comes before Pss
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if !havePSS {
		return 0, 0, fmt.Errorf("no Pss line in smaps_rollup of %d", pid)
	}
	return pss, rss, nil
}

// parseKB parses "   1234 kB" into bytes.
func parseKB(s string) (uint64, error) {
	fields := strings.Fields(s)
	if len(fields) != 2 || fields[1] != "kB" {
		return 0, fmt.Errorf("unexpected memory field %q", s)
	}
	n, err := strconv.ParseUint(fields[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("unexpected memory field %q: %w", s, err)
	}
	return n * 1024, nil
}

// PSS is ReadPSS for a harness that samples: 0 if the process is gone or
// unreadable.
func PSS(pid int) uint64 {
	n, _ := ReadPSS(pid)
	return n
}

// TreePSS sums the PSS of pids.
func TreePSS(pids []int) uint64 {
	var sum uint64
	for _, pid := range pids {
		sum += PSS(pid)
	}
	return sum
}

// Meter adds up the CPU time processes spend while it runs: the processes
// Select picks for its Root and Marker, sampled every Interval, each counted
// from its first sample (or from its start, if it started after the
// meter's first sample) to its last. What a process does after its last
// sample — at most one interval's worth, usually nothing: it is idle when
// killed — is not counted. Sampling, rather than reading a tree's totals
// twice, keeps the CPU of processes that died meanwhile, whose reaped time
// would otherwise go to a parent outside the tree (init, for a killed
// Chrome's orphans).
type Meter struct {
	Root     int
	Marker   string
	Interval time.Duration // 0 means 50 ms

	mu    sync.Mutex
	first map[int]uint64 // pid → ticks at the first sample, for processes already running then
	last  map[int]uint64 // pid → largest ticks seen
}

// Run samples until ctx ends, then once more.
func (m *Meter) Run(ctx context.Context) {
	every := m.Interval
	if every <= 0 {
		every = 50 * time.Millisecond
	}
	m.sample(true)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			m.sample(false)
			return
		case <-t.C:
			m.sample(false)
		}
	}
}

func (m *Meter) sample(first bool) {
	procs := Select(Scan(m.Marker), m.Root)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last == nil {
		m.first, m.last = map[int]uint64{}, map[int]uint64{}
	}
	for _, p := range procs {
		if first {
			m.first[p.PID] = p.CPU
		}
		m.last[p.PID] = max(m.last[p.PID], p.CPU)
	}
}

// Start runs the meter in a goroutine of its own until ctx ends or the
// returned stop is called. stop returns once the last sample is taken, so
// Total after it counts the whole span; calling it again does nothing.
func (m *Meter) Start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { m.Run(ctx) })
	return func() {
		cancel()
		wg.Wait()
	}
}

// Total is the CPU time counted so far.
func (m *Meter) Total() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var sum uint64
	for pid, t := range m.last {
		sum += t - min(t, m.first[pid])
	}
	return Ticks(sum)
}

// SelfCPU is this process's user and system CPU time so far, its children
// not included: what a harness spends itself, apart from the processes it
// meters.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// LoadAvg is the machine's load average over 1, 5 and 15 minutes (the first
// three fields of /proc/loadavg), "" when unreadable: benchmarks record it,
// since figures from a shared machine compare only at similar load.
func LoadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// Machine is the CPU time of every CPU of the machine so far, from the
// first line of /proc/stat, in ticks. A node's figure measured by process
// trees misses what the kernel spends around them: the teardown of a killed
// Chrome's memory runs after the last time its processes can be read, and
// the CPU of the processes init reaps is nobody's. The machine's busy time
// counts everything, the neighbours' too, so it is read on a quiet machine.
type Machine struct {
	User   uint64 // user and nice
	Kernel uint64 // system, irq and softirq
	Idle   uint64 // idle and iowait
	Steal  uint64 // taken by the hypervisor for other guests
}

// Sub is the CPU time between two readings, m taken after o.
func (m Machine) Sub(o Machine) Machine {
	return Machine{User: m.User - o.User, Kernel: m.Kernel - o.Kernel, Idle: m.Idle - o.Idle, Steal: m.Steal - o.Steal}
}

// ReadMachine reads the machine's CPU time so far.
func ReadMachine() (Machine, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Machine{}, err
	}
	return parseMachine(data)
}

// parseMachine reads the "cpu" line of a /proc/stat text: user nice system
// idle iowait irq softirq steal, then guest times, which user already holds.
func parseMachine(data []byte) (Machine, error) {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return Machine{}, fmt.Errorf("procstat: malformed /proc/stat line %q", line)
	}
	var v [8]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return Machine{}, fmt.Errorf("procstat: /proc/stat field %d: %w", i+1, err)
		}
		v[i] = n
	}
	return Machine{User: v[0] + v[1], Kernel: v[2] + v[5] + v[6], Idle: v[3] + v[4], Steal: v[7]}, nil
}
