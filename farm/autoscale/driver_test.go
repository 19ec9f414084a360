package autoscale

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestNewDriver(t *testing.T) {
	tests := []struct {
		cfg  DriverConfig
		name string // driver name, "" for an error
		err  string
	}{
		{DriverConfig{}, DriverNone, ""},
		{DriverConfig{Kind: "none"}, DriverNone, ""},
		{DriverConfig{Kind: "exec", Exec: ExecConfig{Command: []string{"true"}}}, DriverExec, ""},
		{DriverConfig{Kind: "exec"}, "", "needs a command"},
		{DriverConfig{Kind: "aws"}, "", "group name"},
		{DriverConfig{Kind: "k8s"}, "", `unknown driver "k8s"`},
	}
	for _, tc := range tests {
		d, err := NewDriver(t.Context(), tc.cfg, nil)
		switch {
		case tc.name != "" && (err != nil || d.Name() != tc.name):
			t.Errorf("NewDriver(%+v) = %v, %v; want %s", tc.cfg, d, err, tc.name)
		case tc.name == "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("NewDriver(%+v) error %v, want %q", tc.cfg, err, tc.err)
		}
	}
}

func TestNoneDriver(t *testing.T) {
	var d NoneDriver
	if _, ok := d.Last(); ok {
		t.Fatal("zero NoneDriver reports a count")
	}
	for _, n := range []int{4, 0} {
		if err := d.SetDesired(t.Context(), n); err != nil {
			t.Fatal(err)
		}
		if got, ok := d.Last(); !ok || got != n {
			t.Fatalf("Last() = %d, %t; want %d", got, ok, n)
		}
	}
	if err := d.SetDesired(t.Context(), -1); err == nil {
		t.Fatal("accepted a negative count")
	}
}

func TestExecDriver(t *testing.T) {
	dir := t.TempDir()
	script := `printf 'arg=%s env=%s zone=%s token=%s\n' "$1" "$FARM_DESIRED_NODES" "$SCALER_ZONE" "${FARM_API_TOKEN-unset}"; echo warning >&2`
	// The producer's own environment is not the command's: only Env is.
	t.Setenv("FARM_API_TOKEN", "in-the-producers-environment")
	log, logs := observed(t)
	d, err := NewExec(ExecConfig{Command: []string{"sh", "-c", script, "scale"}, Env: []string{"SCALER_ZONE=eu-west-1a"}}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetDesired(t.Context(), 4); err != nil {
		t.Fatal(err)
	}
	entries := logs.FilterMessage("scaling command done").All()
	if len(entries) != 1 {
		t.Fatalf("%d 'scaling command done' entries", len(entries))
	}
	out, _ := entries[0].ContextMap()["output"].(string)
	if !strings.Contains(out, "arg=4 env=4 zone=eu-west-1a token=unset") || !strings.Contains(out, "warning") {
		t.Fatalf("logged output %q, want the count as argument and env, Env's variable, no inherited token, and stderr", out)
	}
	for k, v := range entries[0].ContextMap() {
		if strings.Contains(fmt.Sprint(v), "printf") {
			t.Errorf("log field %s holds the command line (%v), which can carry a credential", k, v)
		}
	}

	tests := []struct {
		name   string
		cfg    ExecConfig
		want   []string // substrings of the error
		logged string   // log message
	}{
		{
			name:   "non-zero exit",
			cfg:    ExecConfig{Command: []string{"sh", "-c", "echo group full >&2; exit 3"}},
			want:   []string{"exit status 3", "group full", `"sh" with 6`},
			logged: "scaling command failed",
		},
		{
			name:   "timeout",
			cfg:    ExecConfig{Command: []string{"sh", "-c", "echo started; sleep 300"}, Timeout: 200 * time.Millisecond},
			want:   []string{"stopped after", "deadline exceeded", "started"},
			logged: "scaling command timed out or was canceled",
		},
		{
			name: "missing program",
			cfg:  ExecConfig{Command: []string{filepath.Join(dir, "no-such-scaler")}},
			want: []string{"start", "no-such-scaler"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log, logs := observed(t)
			d, err := NewExec(tc.cfg, log)
			if err != nil {
				t.Fatal(err)
			}
			err = d.SetDesired(t.Context(), 6)
			if err == nil {
				t.Fatal("SetDesired succeeded")
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if tc.logged != "" && logs.FilterMessage(tc.logged).Len() != 1 {
				t.Errorf("no %q log entry", tc.logged)
			}
		})
	}
}

// TestExecDriverKillsProcessGroup checks that nothing the command started
// outlives SetDesired, after a timeout and after a normal exit.
func TestExecDriverKillsProcessGroup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		script  string
		timeout time.Duration
		wantErr bool
	}{
		{"timeout", `sleep 300 >/dev/null 2>&1 & echo $! > "$PIDFILE"; wait`, 300 * time.Millisecond, true},
		{"background child after exit", `sleep 300 >/dev/null 2>&1 & echo $! > "$PIDFILE"`, 10 * time.Second, false},
		{"background child holding output", `sleep 300 & echo $! > "$PIDFILE"`, 10 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pidfile := filepath.Join(t.TempDir(), "pid")
			d, err := NewExec(ExecConfig{Command: []string{"sh", "-c", tc.script}, Timeout: tc.timeout,
				Env: []string{"PIDFILE=" + pidfile}}, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			err = d.SetDesired(t.Context(), 1)
			if (err != nil) != tc.wantErr {
				t.Fatalf("SetDesired = %v, want error %t", err, tc.wantErr)
			}
			b, err := os.ReadFile(pidfile)
			if err != nil {
				t.Fatal(err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for alive(pid) {
				if time.Now().After(deadline) {
					syscall.Kill(pid, syscall.SIGKILL)
					t.Fatalf("child %d still running 10s after SetDesired returned", pid)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// alive reports whether pid runs (a zombie awaiting its reaper is dead).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestCappedBuffer(t *testing.T) {
	tests := []struct {
		max     int
		writes  []string
		kept    string
		dropped int
	}{
		{10, []string{"hello"}, "hello", 0},
		{10, []string{"hello", "world", "!!"}, "helloworld", 2},
		{4, []string{"abcdefgh"}, "abcd", 4},
		{4, []string{"ab", "cdef", "gh"}, "abcd", 4},
	}
	for _, tc := range tests {
		b := &cappedBuffer{max: tc.max}
		for _, w := range tc.writes {
			if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("Write(%q) = %d, %v", w, n, err)
			}
		}
		if b.String() != tc.kept || b.dropped != tc.dropped {
			t.Errorf("max %d writes %q: kept %q dropped %d, want %q %d", tc.max, tc.writes, b.String(), b.dropped, tc.kept, tc.dropped)
		}
	}
	if got := (&cappedBuffer{max: 8}).tail(4); got != "(no output)" {
		t.Errorf("empty tail = %q", got)
	}
	b := &cappedBuffer{max: 64}
	b.Write([]byte("  first line\nlast line\n"))
	if got := b.tail(9); got != "last line" {
		t.Errorf("tail(9) = %q", got)
	}
}
