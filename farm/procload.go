package farm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/shirou/gopsutil/v3/mem"
)

// MachineLoad is one sample of a node's load (see ProcessLoadSampler).
type MachineLoad struct {
	// CPUPercent is the node's share of all the machine's CPUs since the
	// previous sample, 0..100 (0 on the first sample, which has nothing to
	// compare with).
	CPUPercent float64
	// MemUsedBytes is the memory the node's process uses.
	MemUsedBytes uint64
	// MemTotalBytes is the machine's physical memory.
	MemTotalBytes uint64
}

// ProcessLoadSampler measures the node's own processes rather than the
// machine, so that nodes sharing a machine (farm up runs several) each
// report their own load: CPU is that of this process and every process
// descended from it (its Chromes and their renderers), including
// descendants already reaped, as a share of all the machine's CPUs since
// the previous sample; MemUsedBytes is this process's own resident memory
// (the consumer adds its Chromes' PSS, which the supervisor samples);
// MemTotalBytes is the machine's. Safe for concurrent use.
type ProcessLoadSampler struct {
	// Orphaned, if set, returns the CPU ticks the tree lost so far to
	// processes reaped outside it: a killed Chrome's helpers and renderers,
	// orphaned by the SIGKILL, are reaped by init, so their CPU is in no
	// cutime of this tree, and without it the tree's count goes backwards
	// at every recycle (supervisor.Stats.OrphanedCPUTicks).
	Orphaned func() uint64

	mu        sync.Mutex
	prevTicks uint64
	prevAt    time.Time
	have      bool
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, 100 on
// every Linux architecture Go supports.
const userHZ = 100

// Sample returns the load since the previous call (CPU 0 on the first).
func (s *ProcessLoadSampler) Sample(ctx context.Context) (MachineLoad, error) {
	ticks, rssPages, err := s.ticks()
	if err != nil {
		return MachineLoad{}, fmt.Errorf("load: %w", err)
	}
	vm, err := mem.VirtualMemoryWithContext(ctx)
	if err != nil {
		return MachineLoad{}, fmt.Errorf("load: memory: %w", err)
	}
	now := time.Now()
	s.mu.Lock()
	var pct float64
	if s.have && ticks >= s.prevTicks {
		pct = treeCPUPercent(ticks-s.prevTicks, now.Sub(s.prevAt), runtime.NumCPU())
	}
	s.prevTicks, s.prevAt, s.have = ticks, now, true
	s.mu.Unlock()
	return MachineLoad{
		CPUPercent:    pct,
		MemUsedBytes:  rssPages * uint64(os.Getpagesize()),
		MemTotalBytes: vm.Total,
	}, nil
}

// ticks is the CPU the node's tree has used so far, in ticks, the orphaned
// processes' included, and this process's resident pages.
func (s *ProcessLoadSampler) ticks() (ticks, rssPages uint64, err error) {
	ticks, rssPages, err = treeTicks(os.Getpid())
	if err != nil || s.Orphaned == nil {
		return ticks, rssPages, err
	}
	// Read after the tree: a kill in between counts its processes twice
	// (alive, then orphaned) rather than not at all. Between Chrome's
	// SIGKILL and the supervisor adding their ticks (the kill's few ms)
	// they are in neither: a sample that falls there reads low and the
	// next one makes up for it.
	return ticks + s.Orphaned(), rssPages, nil
}

// treeCPUPercent is CPU time used over wall time on cpus CPUs, 0..100.
func treeCPUPercent(ticks uint64, wall time.Duration, cpus int) float64 {
	if wall <= 0 || cpus < 1 {
		return 0
	}
	pct := 100 * float64(ticks) / userHZ / (wall.Seconds() * float64(cpus))
	return min(pct, 100)
}

// procStat is what treeTicks needs of /proc/<pid>/stat.
type procStat struct {
	ppid  int
	ticks uint64 // utime + stime + cutime + cstime
	rss   uint64 // pages
}

// parseProcStat reads a /proc/<pid>/stat line. The command name, in
// parentheses, may itself hold spaces and parentheses: fields are counted
// from the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("malformed stat")
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state): ppid is field 4, utime..cstime 14..17, rss 24.
	if len(f) < 22 {
		return procStat{}, fmt.Errorf("malformed stat: %d fields", len(f))
	}
	num := func(k int) uint64 {
		v, _ := strconv.ParseUint(string(f[k-3]), 10, 64)
		return v
	}
	return procStat{ppid: int(num(4)), ticks: num(14) + num(15) + num(16) + num(17), rss: num(24)}, nil
}

// treeTicks sums the CPU ticks of root and its live descendants, each with
// its reaped children's, and returns root's own resident pages.
func treeTicks(root int) (ticks, rootRSS uint64, err error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0, err
	}
	stats := make(map[int]procStat, len(entries))
	children := make(map[int][]int)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		st, err := parseProcStat(b)
		if err != nil {
			continue
		}
		stats[pid] = st
		children[st.ppid] = append(children[st.ppid], pid)
	}
	self, ok := stats[root]
	if !ok {
		return 0, 0, fmt.Errorf("process %d not found in /proc", root)
	}
	for todo := []int{root}; len(todo) > 0; {
		pid := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		ticks += stats[pid].ticks
		todo = append(todo, children[pid]...)
	}
	return ticks, self.rss, nil
}
