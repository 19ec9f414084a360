package farm

import (
	"context"
	"fmt"
	"sync"

	"github.com/shirou/gopsutil/v3/cpu"
	"github.com/shirou/gopsutil/v3/mem"
)

// MachineLoad is one sample of the machine a node runs on.
type MachineLoad struct {
	// CPUPercent is the share of all CPUs busy since the previous sample,
	// 0..100 (0 on the first sample, which has nothing to compare with).
	CPUPercent float64
	// MemUsedBytes is memory in use: total minus what is available without
	// swapping (page cache counts as free, as the kernel reclaims it).
	MemUsedBytes uint64
	// MemTotalBytes is the machine's physical memory.
	MemTotalBytes uint64
}

// LoadSampler reads the machine's CPU and memory with gopsutil. CPU is
// measured between consecutive samples from the kernel's cumulative CPU
// times, so each sampler keeps its own previous reading rather than sharing
// gopsutil's process-wide one. Safe for concurrent use.
type LoadSampler struct {
	mu   sync.Mutex
	prev cpu.TimesStat
	have bool
}

// Sample returns the load since the previous call.
func (s *LoadSampler) Sample(ctx context.Context) (MachineLoad, error) {
	times, err := cpu.TimesWithContext(ctx, false)
	if err != nil {
		return MachineLoad{}, fmt.Errorf("load: cpu times: %w", err)
	}
	if len(times) == 0 {
		return MachineLoad{}, fmt.Errorf("load: cpu times: no data")
	}
	vm, err := mem.VirtualMemoryWithContext(ctx)
	if err != nil {
		return MachineLoad{}, fmt.Errorf("load: memory: %w", err)
	}
	s.mu.Lock()
	var pct float64
	if s.have {
		pct = cpuBusyPercent(s.prev, times[0])
	}
	s.prev, s.have = times[0], true
	s.mu.Unlock()
	return MachineLoad{
		CPUPercent:    pct,
		MemUsedBytes:  memUsed(vm.Total, vm.Available),
		MemTotalBytes: vm.Total,
	}, nil
}

// cpuBusyPercent is the busy share of the CPU time that passed between two
// cumulative readings. Idle and iowait count as not busy. A reading that went
// backwards (counter reset, CPU hot-unplug) or did not move gives 0.
func cpuBusyPercent(prev, cur cpu.TimesStat) float64 {
	total := cur.Total() - prev.Total()
	if total <= 0 {
		return 0
	}
	idle := (cur.Idle + cur.Iowait) - (prev.Idle + prev.Iowait)
	busy := total - idle
	switch {
	case busy <= 0:
		return 0
	case busy >= total:
		return 100
	}
	return 100 * busy / total
}

// memUsed is what the node reports as used memory: what a new process could
// not get without swapping.
func memUsed(total, available uint64) uint64 {
	if available >= total {
		return 0
	}
	return total - available
}
