package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat: USER_HZ, 100 on
// every Linux architecture the farm runs on.
const userHZ = 100

// procInfo is what the benchmarks read of one process.
type procInfo struct {
	pid, pgrp int
	cpuTicks  uint64 // utime + stime
	// childTicks is cutime + cstime: the CPU of children it reaped.
	childTicks uint64
	profile    bool // its command line names a profile under the bench's root
}

// scanProcs lists the live processes; profile is set for those whose
// command line has --user-data-dir=<root>…
func scanProcs(root string) []procInfo {
	marker := []byte("--user-data-dir=" + root)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procInfo
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command name, which may hold spaces: state ppid
		// pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
		// stime cutime cstime.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) {
			continue
		}
		f := strings.Fields(string(stat[i+2:]))
		if len(f) < 15 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		pgrp, _ := strconv.Atoi(f[2])
		utime, _ := strconv.ParseUint(f[11], 10, 64)
		stime, _ := strconv.ParseUint(f[12], 10, 64)
		cutime, _ := strconv.ParseUint(f[13], 10, 64)
		cstime, _ := strconv.ParseUint(f[14], 10, 64)
		p := procInfo{pid: pid, pgrp: pgrp, cpuTicks: utime + stime, childTicks: cutime + cstime}
		if root != "" {
			if cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil {
				p.profile = bytes.Contains(cmd, marker)
			}
		}
		out = append(out, p)
	}
	return out
}

// chromeTrees maps the main pid of every Chrome under root to the pids of
// its tree. Chrome runs in a process group of its own whose id is the main
// pid (the browser package starts it so), and its helpers stay in it.
func chromeTrees(root string) map[int][]int {
	procs := scanProcs(root)
	mains := map[int]bool{}
	for _, p := range procs {
		if p.profile && p.pgrp == p.pid {
			mains[p.pid] = true
		}
	}
	trees := make(map[int][]int, len(mains))
	for _, p := range procs {
		if mains[p.pgrp] {
			trees[p.pgrp] = append(trees[p.pgrp], p.pid)
		}
	}
	return trees
}

// pssBytes reads a process's proportional set size.
func pssBytes(pid int) uint64 {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "Pss:"); ok {
			fs := strings.Fields(rest)
			if len(fs) == 2 {
				kb, _ := strconv.ParseUint(fs[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// treePSS sums the PSS of every process of a tree.
func treePSS(pids []int) uint64 {
	var sum uint64
	for _, pid := range pids {
		sum += pssBytes(pid)
	}
	return sum
}

// cpuMeter adds up the CPU time of every process of every Chrome tree under
// a profile root, sampling each process's cumulative time until it is gone.
// What a process does after its last sample (at most one interval's worth,
// usually nothing: it is idle when killed) is not counted.
type cpuMeter struct {
	ticks map[int]uint64 // pid → largest cumulative utime+stime seen
}

func (m *cpuMeter) run(ctx context.Context, root string) {
	m.ticks = map[int]uint64{}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		m.sample(root)
		select {
		case <-ctx.Done():
			m.sample(root)
			return
		case <-t.C:
		}
	}
}

func (m *cpuMeter) sample(root string) {
	procs := scanProcs(root)
	mains := map[int]bool{}
	for _, p := range procs {
		if p.profile && p.pgrp == p.pid {
			mains[p.pid] = true
		}
	}
	for _, p := range procs {
		if mains[p.pgrp] {
			m.ticks[p.pid] = max(m.ticks[p.pid], p.cpuTicks)
		}
	}
}

// total is the CPU time counted; call it after run returned.
func (m *cpuMeter) total() time.Duration {
	var sum uint64
	for _, t := range m.ticks {
		sum += t
	}
	return time.Duration(sum) * time.Second / userHZ
}
