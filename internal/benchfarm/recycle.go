package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/browserfarm/browserfarm/browser"
	"github.com/browserfarm/browserfarm/internal/benchstat"
	"github.com/browserfarm/browserfarm/internal/procstat"
)

// recycleResult is the recycle mode's JSON line. pages_per_s_* are the
// CPU-bound workload's, where recycling costs most; the latency-bound ones
// carry a prefix. Rates are medians over the rounds; an overhead is one
// minus the median of the rounds' recycle/no-recycle ratios.
type recycleResult struct {
	Bench                     string    `json:"bench"`
	LatencyOverheadPct        float64   `json:"latency_overhead_pct"`
	CPUOverheadPct            float64   `json:"cpu_overhead_pct"`
	ChromeBootCPUMS           float64   `json:"chrome_boot_cpu_ms"`
	PagesPerSecRecycle        float64   `json:"pages_per_s_recycle"`
	PagesPerSecNoRecycle      float64   `json:"pages_per_s_norecycle"`
	LatencyPagesPerSecRecycle float64   `json:"latency_pages_per_s_recycle"`
	LatencyPagesPerSecNoRecy  float64   `json:"latency_pages_per_s_norecycle"`
	ChromeBootCPUMSRuns       []float64 `json:"chrome_boot_cpu_ms_runs"`
	ChromeBootCPUMS3s         float64   `json:"chrome_boot_cpu_ms_3s"`
	// BootByBrowser is the boot cost of each installed binary.
	BootByBrowser []bootCost `json:"boot_by_browser,omitempty"`
	// ChromeCPUMSPerPage* are Chrome's CPU per CPU-bound page (median of
	// the rounds), and CPUOverheadByCPUPct the throughput a CPU-bound node
	// loses to recycling as their ratio predicts it: a measure that other
	// load on the machine disturbs far less than pages per second.
	ChromeCPUMSPerPageRecycle   float64 `json:"chrome_cpu_ms_per_page_recycle"`
	ChromeCPUMSPerPageNoRecycle float64 `json:"chrome_cpu_ms_per_page_norecycle"`
	CPUOverheadByCPUPct         float64 `json:"cpu_overhead_by_cpu_pct"`
	// Machine* split the machine's busy CPU per CPU-bound page (medians of
	// the rounds) into user and kernel time, with and without recycling:
	// what the node costs whole, the kernel's work around Chrome's
	// processes included (see procstat.Machine).
	MachineUserMSPerPageRecycle     float64 `json:"machine_user_ms_per_page_recycle"`
	MachineKernelMSPerPageRecycle   float64 `json:"machine_kernel_ms_per_page_recycle"`
	MachineUserMSPerPageNoRecycle   float64 `json:"machine_user_ms_per_page_norecycle"`
	MachineKernelMSPerPageNoRecycle float64 `json:"machine_kernel_ms_per_page_norecycle"`
	// LatencyCPUUtilNoRecycle is the share of the machine's CPUs Chrome
	// used in the latency-bound runs without recycling: how far from
	// saturated that workload is here.
	LatencyCPUUtilNoRecycle float64 `json:"latency_chrome_cpu_util_norecycle"`
	// The slow workload's figures, when it was run (-workloads …,slow).
	SlowOverheadPct        float64 `json:"slow_overhead_pct,omitempty"`
	SlowPagesPerSecRecycle float64 `json:"slow_pages_per_s_recycle,omitempty"`
	SlowPagesPerSecNoRecy  float64 `json:"slow_pages_per_s_norecycle,omitempty"`
	SlowCPUUtilNoRecycle   float64 `json:"slow_chrome_cpu_util_norecycle,omitempty"`
	Jobs                   int     `json:"jobs"`
	Rounds                 int     `json:"rounds"`
	RecycleEvery           int     `json:"recycle_every"`
	ExitAtEnd              bool    `json:"exit_at_end"`
	CPUs                   int     `json:"cpus"`
	// Runs lists every run's rate, in the order run, for the record.
	Runs []runRate `json:"runs"`
}

type bootCost struct {
	Browser           string  `json:"browser"`
	FirstSecondCPUMS  float64 `json:"first_second_cpu_ms"`
	ThreeSecondsCPUMS float64 `json:"three_seconds_cpu_ms"`
}

type runRate struct {
	Workload    string  `json:"workload"`
	Recycle     bool    `json:"recycle"`
	PagesPerSec float64 `json:"pages_per_s"`
	Chromes     int     `json:"chromes"`
	CPUMSPage   float64 `json:"chrome_cpu_ms_per_page"`
	// The machine's CPU per page over the run's wall time (procstat.Machine).
	MachineUserMSPage   float64 `json:"machine_user_ms_per_page"`
	MachineKernelMSPage float64 `json:"machine_kernel_ms_per_page"`
	MachineIdleMSPage   float64 `json:"machine_idle_ms_per_page"`
}

// workload is one kind of page.
type workload struct {
	name   string
	format string // page path with %d for the job number
}

var workloads = []workload{
	{"latency", "/page/%d?delay=400"}, // pages wait ~400 ms for their API, like a remote site
	{"cpu", "/page/%d"},               // no wait: rendering saturates the CPUs
	// Not run by default: slow enough that six sessions leave CPU to spare
	// on a small machine, which is what hiding the restart needs.
	{"slow", "/page/%d?delay=1500"},
}

// recycleBench measures one node's throughput with Chrome recycled every
// recycleEvery jobs against never, alternating the order every round so
// that drift (caches, thermal, other load) hits both alike.
// recycleOpts are the recycle mode's knobs.
type recycleOpts struct {
	jobs, rounds, every int
	lead                int    // ReplacementLead; negative: the supervisor's default
	perChrome           int    // SessionsPerChrome; 0: the supervisor's default
	workloads           string // comma-separated names
	exitAtEnd           bool   // the node's process exits after the run's last job
}

func recycleBench(ctx context.Context, e *env, o recycleOpts) (recycleResult, error) {
	jobs, rounds, recycleEvery := o.jobs, o.rounds, o.every
	res := recycleResult{Bench: "recycle", Jobs: jobs, Rounds: rounds, RecycleEvery: recycleEvery, ExitAtEnd: o.exitAtEnd, CPUs: runtime.NumCPU()}
	var run []workload
	for _, w := range workloads {
		if slices.Contains(strings.Split(o.workloads, ","), w.name) {
			run = append(run, w)
		}
	}
	if len(run) == 0 {
		return res, fmt.Errorf("-workloads %q: none of latency, cpu, slow", o.workloads)
	}
	// Each installed binary's boot, once; the nodes run the default one,
	// whose figures are also the top-level chrome_boot_cpu_ms*.
	def, err := browser.FindExec("")
	if err != nil {
		return res, err
	}
	for _, k := range []browser.Kind{browser.KindShell, browser.KindChrome} {
		path, err := browser.FindExec(k)
		if err != nil {
			continue
		}
		b1, b3, err := bootCPU(ctx, e, 5, k)
		if err != nil {
			return res, err
		}
		res.BootByBrowser = append(res.BootByBrowser, bootCost{Browser: string(k), FirstSecondCPUMS: benchstat.Median(b1), ThreeSecondsCPUMS: benchstat.Median(b3)})
		e.progress("recycle: %s boot costs %.0f CPU-ms in its first second (median of %v), %.0f in its first 3 s", k, benchstat.Median(b1), b1, benchstat.Median(b3))
		if path == def {
			res.ChromeBootCPUMSRuns = b1
			res.ChromeBootCPUMS = benchstat.Median(b1)
			res.ChromeBootCPUMS3s = benchstat.Median(b3)
		}
	}

	rates := map[string]map[bool][]float64{}
	cpuPerPage := map[string]map[bool][]float64{}
	// The CPU-bound workload's machine user and kernel CPU per page.
	machineUser, machineKernel := map[bool][]float64{}, map[bool][]float64{}
	for _, w := range workloads {
		rates[w.name] = map[bool][]float64{}
		cpuPerPage[w.name] = map[bool][]float64{}
	}
	for round := range rounds {
		for _, w := range run {
			order := []bool{true, false}
			if round%2 == 1 {
				order = []bool{false, true}
			}
			for _, recycle := range order {
				every := 0
				if recycle {
					every = recycleEvery
				}
				paths := make([]string, jobs)
				for i := range paths {
					paths[i] = fmt.Sprintf(w.format, i)
				}
				name := fmt.Sprintf("%s-%s-%d", w.name, map[bool]string{true: "recycle", false: "norecycle"}[recycle], round)
				exitAfter := 0
				if o.exitAtEnd {
					exitAfter = jobs
				}
				r, err := e.run(ctx, nodeRun{name: name, paths: paths, recycleEvery: every, lead: o.lead, perChrome: o.perChrome, exitAfter: exitAfter})
				if err != nil {
					return res, err
				}
				perPage := float64(r.chromeCPU.Milliseconds()) / float64(jobs)
				ms := func(ticks uint64) float64 {
					return float64(procstat.Ticks(ticks).Microseconds()) / 1000 / float64(jobs)
				}
				user, kernel, idle := ms(r.machine.User), ms(r.machine.Kernel), ms(r.machine.Idle)
				rates[w.name][recycle] = append(rates[w.name][recycle], r.pagesPerSec)
				cpuPerPage[w.name][recycle] = append(cpuPerPage[w.name][recycle], perPage)
				if w.name == "cpu" {
					machineUser[recycle] = append(machineUser[recycle], user)
					machineKernel[recycle] = append(machineKernel[recycle], kernel)
				}
				res.Runs = append(res.Runs, runRate{Workload: w.name, Recycle: recycle, PagesPerSec: round2(r.pagesPerSec),
					Chromes: r.stats.ChromeStarts, CPUMSPage: round2(perPage),
					MachineUserMSPage: round2(user), MachineKernelMSPage: round2(kernel), MachineIdleMSPage: round2(idle)})
				e.progress("recycle: round %d %-9s recycle=%-5v %.2f pages/s, Chrome %.0f CPU-ms/page; machine %.0f user + %.0f kernel ms/page, %.0f idle (%d Chromes, %.1f s)",
					round+1, w.name, recycle, r.pagesPerSec, perPage, user, kernel, idle, r.stats.ChromeStarts, r.wall.Seconds())
			}
		}
	}
	// Each round's two runs of a workload ran back to back, so their ratio
	// is what drift on a shared machine disturbs least; the median of the
	// rounds' ratios then ignores a round that another process spoiled.
	overhead := func(w string) (on, off, pct float64) {
		if len(rates[w][true]) == 0 {
			return 0, 0, 0
		}
		var ratios []float64
		for i := range rates[w][true] {
			ratios = append(ratios, rates[w][true][i]/rates[w][false][i])
		}
		return benchstat.Median(rates[w][true]), benchstat.Median(rates[w][false]), round2((1 - benchstat.Median(ratios)) * 100)
	}
	var on, off float64
	on, off, res.LatencyOverheadPct = overhead("latency")
	res.LatencyPagesPerSecRecycle, res.LatencyPagesPerSecNoRecy = round2(on), round2(off)
	on, off, res.CPUOverheadPct = overhead("cpu")
	res.PagesPerSecRecycle, res.PagesPerSecNoRecycle = round2(on), round2(off)
	on, off, res.SlowOverheadPct = overhead("slow")
	res.SlowPagesPerSecRecycle, res.SlowPagesPerSecNoRecy = round2(on), round2(off)
	if l := cpuPerPage["slow"][false]; len(l) > 0 {
		res.SlowCPUUtilNoRecycle = round2(benchstat.Median(l) / 1000 * benchstat.Median(rates["slow"][false]) / float64(runtime.NumCPU()))
	}
	if l := cpuPerPage["latency"][false]; len(l) > 0 {
		res.LatencyCPUUtilNoRecycle = round2(benchstat.Median(l) / 1000 * benchstat.Median(rates["latency"][false]) / float64(runtime.NumCPU()))
	}
	con, coff := benchstat.Median(cpuPerPage["cpu"][true]), benchstat.Median(cpuPerPage["cpu"][false])
	res.ChromeCPUMSPerPageRecycle, res.ChromeCPUMSPerPageNoRecycle = round2(con), round2(coff)
	if con > 0 {
		res.CPUOverheadByCPUPct = round2((1 - coff/con) * 100)
	}
	res.MachineUserMSPerPageRecycle = round2(benchstat.Median(machineUser[true]))
	res.MachineKernelMSPerPageRecycle = round2(benchstat.Median(machineKernel[true]))
	res.MachineUserMSPerPageNoRecycle = round2(benchstat.Median(machineUser[false]))
	res.MachineKernelMSPerPageNoRecycle = round2(benchstat.Median(machineKernel[false]))
	return res, nil
}

// bootCPU launches Chrome n times, one at a time on an idle node, and
// returns the CPU time (ms) its whole process tree used in its first second
// — what each recycle costs the machine — and in its first three seconds,
// which shows whether the boot really was over after one.
func bootCPU(ctx context.Context, e *env, n int, kind browser.Kind) (first, three []float64, err error) {
	root, err := os.MkdirTemp(e.dir, "boot-")
	if err != nil {
		return nil, nil, err
	}
	treeMS := func(pid int) float64 {
		var ticks uint64
		for _, p := range procstat.Scan("") {
			if p.PGRP == pid {
				ticks += p.CPU
				if p.PID == pid {
					ticks += p.ChildCPU
				}
			}
		}
		return float64(procstat.Ticks(ticks).Microseconds()) / 1000
	}
	for range n {
		t0 := time.Now()
		b, err := browser.Launch(ctx, browser.Options{Kind: kind, ProfileRoot: root, Logger: e.log.Named("boot")})
		if err != nil {
			return nil, nil, err
		}
		// Chrome keeps starting helpers and services after it answers CDP.
		time.Sleep(time.Until(t0.Add(time.Second)))
		first = append(first, treeMS(b.PID()))
		time.Sleep(time.Until(t0.Add(3 * time.Second)))
		three = append(three, treeMS(b.PID()))
		if err := b.Kill(); err != nil {
			return nil, nil, err
		}
	}
	return first, three, nil
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

func itoa(i int) string { return strconv.Itoa(i) }
