package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat: USER_HZ, 100 on
// every Linux architecture the farm runs on.
const userHZ = 100

// statCPU is what the harness reads of one process in /proc/PID/stat.
type statCPU struct {
	ppid int
	// ticks is utime + stime + cutime + cstime: the process's own CPU and
	// that of the children it reaped. Chrome reaps its renderers, so the
	// CPU of the tabs a run closed stays in the tree's sum.
	ticks uint64
}

// parseStat reads ppid and the four CPU times from the text of
// /proc/PID/stat. The command name may hold spaces and parentheses, so the
// fields are counted from its last ')'.
func parseStat(data []byte) (statCPU, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return statCPU{}, fmt.Errorf("stat: no command name in %q", data)
	}
	// After the name: state ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime …
	f := strings.Fields(string(data[i+2:]))
	if len(f) < 15 {
		return statCPU{}, fmt.Errorf("stat: %d fields after the command name, want ≥ 15", len(f))
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return statCPU{}, fmt.Errorf("stat: ppid %q: %w", f[1], err)
	}
	var s statCPU
	s.ppid = ppid
	for _, v := range f[11:15] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return statCPU{}, fmt.Errorf("stat: cpu time %q: %w", v, err)
		}
		s.ticks += n
	}
	return s, nil
}

// treeCPU sums the CPU of every living process in the tree under root
// (root included), found through the parent links of /proc.
func treeCPU(root int) time.Duration {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	procs := map[int]statCPU{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		if s, err := parseStat(data); err == nil {
			procs[pid] = s
		}
	}
	return time.Duration(sumTree(procs, root)) * time.Second / userHZ
}

// sumTree adds the ticks of root and its descendants in procs.
func sumTree(procs map[int]statCPU, root int) uint64 {
	children := map[int][]int{}
	for pid, s := range procs {
		children[s.ppid] = append(children[s.ppid], pid)
	}
	var sum uint64
	stack := []int{root}
	seen := map[int]bool{}
	for len(stack) > 0 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		if s, ok := procs[pid]; ok {
			sum += s.ticks
		}
		stack = append(stack, children[pid]...)
	}
	return sum
}
