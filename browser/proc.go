package browser

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shirou/gopsutil/v3/process"

	"github.com/browserfarm/browserfarm/internal/procstat"
)

// Memory is the memory of Chrome's whole process tree.
type Memory struct {
	// PSSBytes is the proportional set size: each shared page is divided
	// among the processes that map it, so the sum does not count Chrome's
	// shared pages once per process as summed RSS does.
	PSSBytes uint64
	// RSSBytes is the summed resident set size, for comparison.
	RSSBytes uint64
	// Processes is the number of processes in the tree, the main one included.
	Processes int
}

// Memory measures Chrome's process tree: the main process and every
// descendant, found through their parent links with gopsutil, with PSS read
// from /proc/PID/smaps_rollup. A process that exits during the walk is
// skipped.
func (b *Browser) Memory(ctx context.Context) (Memory, error) {
	select {
	case <-b.done:
		return Memory{}, &Error{Class: ClassCrashed, Retriable: true, Err: fmt.Errorf("chrome %d is gone", b.pid)}
	default:
	}
	tree, err := processTree(ctx, int32(b.pid))
	if err != nil {
		return Memory{}, fmt.Errorf("browser: listing chrome's processes: %w", err)
	}
	var m Memory
	for _, pid := range append([]int32{int32(b.pid)}, tree...) {
		pss, err := procstat.ReadPSS(int(pid))
		if err != nil {
			continue
		}
		p, err := process.NewProcessWithContext(ctx, pid)
		if err != nil {
			continue
		}
		mi, err := p.MemoryInfoWithContext(ctx)
		if err != nil {
			continue
		}
		m.PSSBytes += pss
		m.RSSBytes += mi.RSS
		m.Processes++
	}
	if m.Processes == 0 {
		return Memory{}, fmt.Errorf("browser: chrome %d has no readable process", b.pid)
	}
	return m, nil
}

// processTree returns the descendants of root (not root itself).
func processTree(ctx context.Context, root int32) ([]int32, error) {
	procs, err := process.ProcessesWithContext(ctx)
	if err != nil {
		return nil, err
	}
	children := make(map[int32][]int32, len(procs))
	for _, p := range procs {
		ppid, err := p.PpidWithContext(ctx)
		if err != nil {
			continue
		}
		children[ppid] = append(children[ppid], p.Pid)
	}
	var out []int32
	queue := []int32{root}
	seen := map[int32]bool{root: true}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
				queue = append(queue, c)
			}
		}
	}
	return out, nil
}

// procStat is the part of /proc/PID/stat that Kill needs.
type procStat struct {
	state byte
	ppid  int
	pgrp  int
}

// parseStat parses /proc/PID/stat. The command name is in parentheses and
// may itself hold spaces and parentheses, so fields are read after the last
// ')'.
func parseStat(data []byte) (procStat, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return procStat{}, fmt.Errorf("malformed stat %q", data)
	}
	f := strings.Fields(string(data[i+2:]))
	if len(f) < 3 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("malformed stat %q", data)
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return procStat{}, fmt.Errorf("malformed stat %q", data)
	}
	return procStat{state: f[0][0], ppid: ppid, pgrp: pgrp}, nil
}

// livingOf lists the live (not zombie, not dead) processes that belong to a
// Chrome: members of its process group, the given pids, and any process whose
// command line names its profile directory (Chrome's children pass
// --user-data-dir, the crash handler its database inside it).
func livingOf(pgid int, pids []int32, profileDir string) []int {
	want := make(map[int]bool, len(pids))
	for _, p := range pids {
		want[int(p)] = true
	}
	// The path ends with a separator or the argument: one profile's path
	// can be a prefix of another's (bfc-12 and bfc-123).
	flag := []byte("--user-data-dir=" + profileDir)
	inside := []byte(profileDir + "/")
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		st, err := parseStat(data)
		if err != nil || st.state == 'Z' || st.state == 'X' || st.state == 'x' {
			continue
		}
		if st.pgrp == pgid || want[pid] {
			out = append(out, pid)
			continue
		}
		if profileDir != "" {
			cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err == nil && namesProfile(cmdline, flag, inside) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// namesProfile reports whether a command line has the profile's
// --user-data-dir flag or a path inside the profile. Arguments are
// NUL-separated, or space-separated where Chrome rewrote its process title.
func namesProfile(cmdline, flag, inside []byte) bool {
	if bytes.Contains(cmdline, inside) {
		return true
	}
	for rest := cmdline; ; {
		i := bytes.Index(rest, flag)
		if i < 0 {
			return false
		}
		end := i + len(flag)
		if end == len(rest) || rest[end] == 0 || rest[end] == ' ' {
			return true
		}
		rest = rest[end:]
	}
}

// waitGone kills and waits until no live process of the Chrome is left.
func waitGone(pgid int, pids []int32, profileDir string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		left := livingOf(pgid, pids, profileDir)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("browser: chrome processes %v still alive %v after SIGKILL", left, limit)
		}
		for _, pid := range left {
			// Already-dead processes answer ESRCH; nothing to do then.
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
