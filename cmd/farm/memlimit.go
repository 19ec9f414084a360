package main

import (
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/browserfarm/browserfarm/supervisor"
)

// minAutoCeilingMB is the least ceiling --chrome-memory-ceiling-mb auto
// sets for a Chrome of sessions sessions: a headless shell's tree with six
// sessions of ordinary pages holds 400-500 MB (the README's soak), one with
// a single session about 150, and a ceiling under that would retire every
// Chrome at its first sample.
func minAutoCeilingMB(sessions int) int {
	return max(1024*sessions/6, 256)
}

// autoMemoryCeilingMB is what --chrome-memory-ceiling-mb auto stands for
// under a memory limit of limit bytes (0: none) for a node of capacity
// sessions, sessionsPerChrome a Chrome: the limit shared by its Chromes and
// one more, so that a Chrome growing past its share (a page that leaks) is
// replaced while its replacement still fits beside the others, and not
// under minAutoCeilingMB; off without a limit.
func autoMemoryCeilingMB(limit int64, capacity, sessionsPerChrome int) int {
	if limit <= 0 {
		return off
	}
	lanes := supervisor.Lanes(capacity, sessionsPerChrome)
	if len(lanes) == 0 {
		return off
	}
	// At least what the Chrome of the most sessions holds.
	return max(int(limit>>20)/(len(lanes)+1), minAutoCeilingMB(lanes[0]))
}

// fleetMemoryCeiling is the --chrome-memory-ceiling-mb of each of the n
// consumers `farm up` runs, of capacity sessions, sessionsPerChrome a
// Chrome: they share its memory limit, which auto in each would take whole,
// so auto stands for a share of it here; a number or off set in the
// environment is passed on.
func fleetMemoryCeiling(env *environment, n, capacity, sessionsPerChrome int) string {
	if v := env.getenv("FARM_CHROME_MEMORY_CEILING_MB"); v != "" && v != autoWord {
		return v
	}
	return orOff(autoMemoryCeilingMB(cgroupMemoryLimit(env.root)/int64(max(n, 1)), capacity, sessionsPerChrome))
}

// unlimitedV1 is the least value cgroup v1 reports for "no limit"
// (PAGE_COUNTER_MAX in bytes, rounded to the page size, is just under
// 2^63).
const unlimitedV1 = 1 << 62

// cgroupMemoryLimit is the memory limit this process runs under: the lowest
// limit on the path from its cgroup, as proc/self/cgroup names it, up to the
// hierarchy's root — memory.max under cgroup v2, memory.limit_in_bytes under
// v1's memory controller (which a hybrid host uses when it has it). 0 means
// none: no limit is set, or nothing says so. fsys is the machine's root
// (nil: none to read).
func cgroupMemoryLimit(fsys fs.FS) int64 {
	if fsys == nil {
		return 0
	}
	data, err := fs.ReadFile(fsys, "proc/self/cgroup")
	if err != nil {
		return 0
	}
	var v1, v2 string
	for line := range strings.SplitSeq(string(data), "\n") {
		id, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		controllers, p, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		switch {
		case id == "0" && controllers == "":
			v2 = p
		case slices.Contains(strings.Split(controllers, ","), "memory"):
			v1 = p
		}
	}
	// A v1 memory controller the process cannot see mounted where it
	// looks leaves the v2 hierarchy, if any, to say.
	if _, err := fs.Stat(fsys, v1Mount); v1 != "" && err == nil {
		return lowestLimit(fsys, v1Mount, v1, "memory.limit_in_bytes")
	}
	if v2 != "" {
		return lowestLimit(fsys, "sys/fs/cgroup", v2, "memory.max")
	}
	return 0
}

const v1Mount = "sys/fs/cgroup/memory"

// lowestLimit is the lowest limit in file of the cgroup at p of the
// hierarchy mounted at mount and of each of its ancestors. A container with
// a cgroup namespace of its own sees its cgroup as the root ("/"); one
// without may be shown a host path its mount does not have, and then its
// own cgroup is the mount's root, which is read instead.
func lowestLimit(fsys fs.FS, mount, p, file string) int64 {
	dir := func(p string) string { return path.Join(mount, strings.TrimPrefix(path.Clean(p), "/")) }
	if _, err := fs.Stat(fsys, dir(p)); err != nil {
		p = "/"
	}
	var lowest int64
	for {
		if b, err := fs.ReadFile(fsys, path.Join(dir(p), file)); err == nil {
			n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			// "max" (v2) and v1's huge numbers are no limit.
			if err == nil && n > 0 && n < unlimitedV1 && (lowest == 0 || n < lowest) {
				lowest = n
			}
		}
		if p == "/" || p == "." || p == "" {
			return lowest
		}
		p = path.Dir(p)
	}
}
