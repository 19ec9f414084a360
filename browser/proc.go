package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

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
// descendant, found through their parent links, with PSS and RSS read from
// /proc/PID/smaps_rollup. A process that exits during the walk is skipped.
func (b *Browser) Memory(ctx context.Context) (Memory, error) {
	select {
	case <-b.gone.Done():
		return Memory{}, &Error{Class: ClassCrashed, Retriable: true, Err: fmt.Errorf("chrome %d is gone", b.pid)}
	default:
	}
	var m Memory
	for _, pid := range append([]int32{int32(b.pid)}, processTree(int32(b.pid))...) {
		if ctx.Err() != nil {
			return Memory{}, fmt.Errorf("browser: measuring chrome's memory: %w", ctx.Err())
		}
		pss, rss, err := procstat.ReadMemory(int(pid))
		if err != nil {
			continue
		}
		m.PSSBytes += pss
		m.RSSBytes += rss
		m.Processes++
	}
	if m.Processes == 0 {
		return Memory{}, fmt.Errorf("browser: chrome %d has no readable process", b.pid)
	}
	return m, nil
}

// processTree returns the live descendants of root (not root itself). It
// reads /proc directly: gopsutil's listing took ~19 ms of CPU for the ~130
// processes of a loaded machine, at every kill and memory sample.
func processTree(root int32) []int32 {
	pids, _ := descendantsCPU(int(root))
	return pids
}

// descendantsCPU returns the live descendants of root (not root itself)
// and the CPU ticks they and their reaped children used.
func descendantsCPU(root int) (pids []int32, ticks uint64) {
	for _, p := range procstat.Select(procstat.Scan(""), root) {
		if p.PID != root {
			pids = append(pids, int32(p.PID))
			ticks += p.CPU + p.ChildCPU
		}
	}
	return pids, ticks
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
// --user-data-dir, the crash handler its database inside it) and that runs
// one of Chrome's executables (see chromeExe). known limits the search to
// the given pids: a few reads instead of every process. Processes in skip
// are left out.
func livingOf(pgid int, pids []int32, profileDir, exeDir string, known bool, skip map[int]bool) []int {
	want := make(map[int]bool, len(pids))
	for _, p := range pids {
		want[int(p)] = true
	}
	// The path ends with a separator or the argument: one profile's path
	// can be a prefix of another's (bfc-12 and bfc-123).
	flag := []byte("--user-data-dir=" + profileDir)
	inside := []byte(profileDir + "/")
	var names []string
	if known {
		for _, p := range pids {
			names = append(names, strconv.Itoa(int(p)))
		}
	} else {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return nil
		}
		for _, e := range entries {
			names = append(names, e.Name())
		}
	}
	self := os.Getpid()
	var out []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == self || skip[pid] {
			continue
		}
		data, err := os.ReadFile("/proc/" + name + "/stat")
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
			cmdline, err := os.ReadFile("/proc/" + name + "/cmdline")
			if err == nil && namesProfile(cmdline, flag, inside) && chromeExe(name, exeDir) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// chromeExe reports whether process name (its /proc entry) runs one of
// Chrome's executables: one in exeDir, Chrome's own directory (its crash
// handler is there too). A process that names the profile on its command
// line but runs something else, an operator's tail -f of a Chrome log, is
// not Chrome's to kill. Without exeDir (a start that failed before Chrome
// answered), a process of this user is taken as Chrome's.
func chromeExe(name, exeDir string) bool {
	if exeDir == "" {
		fi, err := os.Stat("/proc/" + name)
		if err != nil {
			return false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		return ok && int(st.Uid) == os.Geteuid()
	}
	// Unreadable (another user's process): not Chrome's.
	exe, err := os.Readlink("/proc/" + name + "/exe")
	return err == nil && filepath.Dir(exe) == exeDir
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
//
// It first waits for the processes it knows (the tree found before the
// kill), then scans every process for the ones it does not know — members
// that left the tree, the crash handler — usually once: scanning at every
// step cost 20-30 ms of CPU per kill with ~130 processes on the machine.
// A process it may not signal (EPERM) is not waited for: it will not die
// of anything Kill can do, and its pid goes into the error at once rather
// than after limit spent scanning /proc.
func waitGone(pgid int, pids []int32, profileDir, exeDir string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	known := append([]int32{int32(pgid)}, pids...)
	denied := map[int]bool{}
	signal := func(left []int) {
		for _, pid := range left {
			// Already-dead processes answer ESRCH; nothing to do then.
			if err := syscall.Kill(pid, syscall.SIGKILL); errors.Is(err, syscall.EPERM) {
				denied[pid] = true
			}
		}
	}
	for time.Now().Before(deadline) {
		left := livingOf(pgid, known, profileDir, exeDir, true, denied)
		if len(left) == 0 {
			break
		}
		signal(left)
		time.Sleep(5 * time.Millisecond)
	}
	for {
		left := livingOf(pgid, pids, profileDir, exeDir, false, denied)
		if len(left) == 0 {
			if len(denied) > 0 {
				return fmt.Errorf("browser: chrome processes %v may not be killed (permission denied)", slices.Sorted(maps.Keys(denied)))
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("browser: chrome processes %v still alive %v after SIGKILL", left, limit)
		}
		signal(left)
		time.Sleep(5 * time.Millisecond)
	}
}
