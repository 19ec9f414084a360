package main

import (
	"bytes"
	"testing"
	"testing/fstest"

	"go.uber.org/zap"
)

func TestCgroupMemoryLimit(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	const gib = 1 << 30
	for _, tc := range []struct {
		name string
		fs   fstest.MapFS
		want int64
	}{
		{"no proc", fstest.MapFS{}, 0},
		{"v2, a container's own namespace", fstest.MapFS{
			"proc/self/cgroup":           file("0::/\n"),
			"sys/fs/cgroup/memory.max":   file("4294967296\n"),
			"sys/fs/cgroup/cgroup.procs": file("1\n"),
		}, 4 * gib},
		{"v2, no limit", fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("max\n"),
		}, 0},
		{"v2, a systemd service under a lower slice limit", fstest.MapFS{
			"proc/self/cgroup": file("0::/farm.slice/farm-consumer.service\n"),
			"sys/fs/cgroup/farm.slice/farm-consumer.service/memory.max": file("max\n"),
			"sys/fs/cgroup/farm.slice/memory.max":                       file("3221225472\n"),
		}, 3 * gib},
		{"v2, the service's own limit under a higher one", fstest.MapFS{
			"proc/self/cgroup": file("0::/kubepods/burstable/pod1/c1\n"),
			"sys/fs/cgroup/kubepods/burstable/pod1/c1/memory.max": file("2147483648\n"),
			"sys/fs/cgroup/kubepods/burstable/pod1/memory.max":    file("4294967296\n"),
			"sys/fs/cgroup/kubepods/memory.max":                   file("max\n"),
		}, 2 * gib},
		{"v2, a host path the container does not mount: its own root", fstest.MapFS{
			"proc/self/cgroup":         file("0::/kubepods/pod1/c1\n"),
			"sys/fs/cgroup/memory.max": file("1073741824\n"),
		}, gib},
		{"v1 on a hybrid host (memory under v1, the rest of v2 unified)", fstest.MapFS{
			"proc/self/cgroup": file("9:name=systemd:/\n4:memory:/process_api/c7b9\n0::/\n"),
			"sys/fs/cgroup/memory/process_api/c7b9/memory.limit_in_bytes": file("9223372036854771712\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                  file("9223372036854771712\n"),
			"sys/fs/cgroup/memory.max":                                    file("1073741824\n"),
		}, 0},
		{"v1 with a limit, controllers joined", fstest.MapFS{
			"proc/self/cgroup": file("5:memory,hugetlb:/docker/abc\n"),
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": file("536870912\n"),
			"sys/fs/cgroup/memory/docker/memory.limit_in_bytes":     file("9223372036854771712\n"),
		}, gib / 2},
		{"v1 listed but not mounted: v2 says", fstest.MapFS{
			"proc/self/cgroup":         file("4:memory:/x\n0::/\n"),
			"sys/fs/cgroup/memory.max": file("1073741824\n"),
		}, gib},
		{"unreadable limit", fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("lots\n"),
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cgroupMemoryLimit(tc.fs); got != tc.want {
				t.Errorf("limit %d, want %d", got, tc.want)
			}
		})
	}
}

func TestAutoMemoryCeiling(t *testing.T) {
	for _, tc := range []struct {
		limit               int64
		capacity, perChrome int
		want                int
	}{
		{0, 6, 1, off},
		{4 << 30, 6, 1, 4096 / 7}, // six Chromes and one more
		{4 << 30, 6, 6, 2048},     // one Chrome and one more
		{4 << 30, 6, 4, 4096 / 3}, // two Chromes of three
		{16 << 30, 6, 1, 16384 / 7},
		{16 << 30, 6, 6, 8192},
		{1 << 30, 6, 1, 256},
		{1 << 30, 6, 6, 1024},
		{1536 << 20, 6, 6, 1024},
	} {
		if got := autoMemoryCeilingMB(tc.limit, tc.capacity, tc.perChrome); got != tc.want {
			t.Errorf("limit %d, %d sessions, %d a Chrome: ceiling %d MiB, want %d", tc.limit, tc.capacity, tc.perChrome, got, tc.want)
		}
	}
	// The flag's default is auto, resolved from the machine's root; an
	// explicit number is kept.
	fs := newFlagSet("consumer", "", &bytes.Buffer{})
	var o consumerOptions
	o.register(fs)
	if err := fs.parse(nil, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	root := fstest.MapFS{
		"proc/self/cgroup":         &fstest.MapFile{Data: []byte("0::/\n")},
		"sys/fs/cgroup/memory.max": &fstest.MapFile{Data: []byte("4294967296\n")},
	}
	if limit, auto := o.resolveMemoryCeiling(root); limit != 4<<30 || !auto || o.memoryCeilingMB != 4096/7 {
		t.Errorf("auto under 4 GiB: limit %d, ceiling %d MiB", limit, o.memoryCeilingMB)
	}
	if got := o.supervisorConfig(zap.NewNop(), nil).MemoryCeilingBytes; got != 4096/7<<20 {
		t.Errorf("MemoryCeilingBytes %d", got)
	}
	o = consumerOptions{}
	fs = newFlagSet("consumer", "", &bytes.Buffer{})
	o.register(fs)
	if err := fs.parse([]string{"--chrome-memory-ceiling-mb", "700"}, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if _, auto := o.resolveMemoryCeiling(root); auto || o.memoryCeilingMB != 700 {
		t.Errorf("an explicit 700 became %d", o.memoryCeilingMB)
	}
}

func TestFleetMemoryCeiling(t *testing.T) {
	root := fstest.MapFS{
		"proc/self/cgroup":         &fstest.MapFile{Data: []byte("0::/\n")},
		"sys/fs/cgroup/memory.max": &fstest.MapFile{Data: []byte("8589934592\n")}, // 8 GiB
	}
	for _, tc := range []struct {
		name string
		set  string
		root fstest.MapFS
		n    int
		want string
	}{
		{"auto shares the limit", "", root, 4, "292"}, // 2 GiB a consumer, over 6 Chromes and 1
		{"auto, two consumers", "auto", root, 2, "585"},
		{"no limit", "", fstest.MapFS{}, 2, "off"},
		{"a number is passed on", "700", root, 4, "700"},
		{"off is passed on", "off", root, 4, "off"},
	} {
		env := &environment{root: tc.root, getenv: func(k string) string {
			if k == "FARM_CHROME_MEMORY_CEILING_MB" {
				return tc.set
			}
			return ""
		}}
		if got := fleetMemoryCeiling(env, tc.n, 6, 1); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
