//go:build imagecheck

package imagecheck

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/browserfarm/browserfarm/internal/testsite"
	"github.com/browserfarm/browserfarm/internal/testutil"
	"github.com/browserfarm/browserfarm/jobqueue"
)

// What scripts/image-check.sh passes in besides the image: the manifests of
// deploy/kubernetes as JSON (deploy/kubernetes/tojson), and a read-only view
// of the image's filesystem for containers with readOnlyRootFilesystem.
const (
	producerManifestEnv = "FARM_IMAGE_K8S_PRODUCER"
	consumerManifestEnv = "FARM_IMAGE_K8S_CONSUMER"
	rootfsROEnv         = "FARM_IMAGE_ROOTFS_RO"
)

// deployment is the part of an apps/v1 Deployment the pod check runs.
type deployment struct {
	Kind string `json:"kind"`
	Spec struct {
		Template struct {
			Spec podSpec `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

type podSpec struct {
	SecurityContext struct {
		RunAsNonRoot *bool  `json:"runAsNonRoot"`
		RunAsUser    *int64 `json:"runAsUser"`
		RunAsGroup   *int64 `json:"runAsGroup"`
	} `json:"securityContext"`
	TerminationGracePeriodSeconds *int64      `json:"terminationGracePeriodSeconds"`
	Containers                    []container `json:"containers"`
}

type container struct {
	Name            string   `json:"name"`
	Command         []string `json:"command"`
	Args            []string `json:"args"`
	Env             []envVar `json:"env"`
	LivenessProbe   *probe   `json:"livenessProbe"`
	StartupProbe    *probe   `json:"startupProbe"`
	ReadinessProbe  *probe   `json:"readinessProbe"`
	SecurityContext struct {
		RunAsUser                *int64 `json:"runAsUser"`
		RunAsGroup               *int64 `json:"runAsGroup"`
		AllowPrivilegeEscalation *bool  `json:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool   `json:"readOnlyRootFilesystem"`
		Privileged               bool   `json:"privileged"`
		Capabilities             struct {
			Add  []string `json:"add"`
			Drop []string `json:"drop"`
		} `json:"capabilities"`
	} `json:"securityContext"`
	Ports []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	} `json:"ports"`
}

type envVar struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	ValueFrom *struct {
		FieldRef *struct {
			FieldPath string `json:"fieldPath"`
		} `json:"fieldRef"`
		SecretKeyRef *struct {
			Key      string `json:"key"`
			Optional bool   `json:"optional"`
		} `json:"secretKeyRef"`
		ConfigMapKeyRef  json.RawMessage `json:"configMapKeyRef"`
		ResourceFieldRef json.RawMessage `json:"resourceFieldRef"`
	} `json:"valueFrom"`
}

type probe struct {
	Exec *struct {
		Command []string `json:"command"`
	} `json:"exec"`
	HTTPGet *struct {
		Path string `json:"path"`
		Port any    `json:"port"` // a number or a port's name
	} `json:"httpGet"`
}

// pod is one container of a manifest made ready to run here.
type pod struct {
	name     string
	spec     podSpec
	c        container
	rootfs   string
	uid, gid int64
	env      []string
}

// loadPod reads the Deployment of a tojson file and resolves what the
// cluster would: the user, the environment (secrets from secrets, the pod's
// name), then the test's overrides. A field the check does not model fails
// it, so that a manifest cannot gain a setting the check silently skips.
func loadPod(t *testing.T, file, name string, secrets map[string]string, override map[string]string) *pod {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d deployment
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var doc deployment
		if err := json.Unmarshal(line, &doc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if doc.Kind == "Deployment" {
			d = doc
		}
	}
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers; the check runs pods of one", file, len(spec.Containers))
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc.Privileged || len(sc.Capabilities.Add) > 0 {
		t.Fatalf("%s: privileged or added capabilities are not modeled by the check", file)
	}
	p := &pod{name: name, spec: spec, c: c, rootfs: os.Getenv(rootfsEnv)}
	if sc.ReadOnlyRootFilesystem {
		if p.rootfs = os.Getenv(rootfsROEnv); p.rootfs == "" {
			t.Fatalf("%s: readOnlyRootFilesystem, and %s is not set", file, rootfsROEnv)
		}
	}
	imageUID, imageGID := imageUser(t)
	p.uid, p.gid = first(sc.RunAsUser, spec.SecurityContext.RunAsUser, imageUID), first(sc.RunAsGroup, spec.SecurityContext.RunAsGroup, imageGID)
	if nonRoot := spec.SecurityContext.RunAsNonRoot; nonRoot != nil && *nonRoot && p.uid == 0 {
		t.Fatalf("%s: runAsNonRoot with uid 0", file)
	}

	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, l := range readLines(t, os.Getenv(imageEnvEnv)) {
		k, v, _ := strings.Cut(l, "=")
		set(k, v)
	}
	// The runtime sets HOME from the image's passwd entry of the uid.
	set("HOME", homeOf(t, p.rootfs, p.uid))
	for _, e := range c.Env {
		switch vf := e.ValueFrom; {
		case vf == nil:
			set(e.Name, e.Value)
		case vf.SecretKeyRef != nil:
			v, ok := secrets[vf.SecretKeyRef.Key]
			if !ok && !vf.SecretKeyRef.Optional {
				t.Fatalf("%s: %s: secret key %q not given to the check", file, e.Name, vf.SecretKeyRef.Key)
			}
			if ok {
				set(e.Name, v)
			}
		case vf.FieldRef != nil && vf.FieldRef.FieldPath == "metadata.name":
			set(e.Name, name)
		default:
			t.Fatalf("%s: %s: this kind of valueFrom is not modeled by the check", file, e.Name)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(override)) {
		v := override[k]
		old, had := env[k]
		set(k, v)
		t.Logf("%s: %s=%s (the manifest's %q; %s)", name, k, v, old, map[bool]string{true: "overridden", false: "added"}[had])
	}
	for _, k := range order {
		p.env = append(p.env, k+"="+env[k])
	}
	return p
}

func first(vs ...*int64) int64 {
	for _, v := range vs {
		if v != nil {
			return *v
		}
	}
	return 0
}

// imageUser is the image's own user, as image-check.sh resolved it.
func imageUser(t *testing.T) (*int64, *int64) {
	t.Helper()
	u, g, ok := strings.Cut(os.Getenv(userEnv), ":")
	uid, err1 := strconv.ParseInt(u, 10, 64)
	gid, err2 := strconv.ParseInt(g, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("%s=%q: want uid:gid", userEnv, os.Getenv(userEnv))
	}
	return &uid, &gid
}

func homeOf(t *testing.T, rootfs string, uid int64) string {
	t.Helper()
	f, err := os.Open(filepath.Join(rootfs, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) >= 6 && fields[2] == strconv.FormatInt(uid, 10) {
			return fields[5]
		}
	}
	return "/"
}

// command is argv run in the pod's container: chroot into the image, then
// the image's setpriv takes the pod's user, no_new_privs when privilege
// escalation is off, and an empty capability bounding set when every
// capability is dropped.
func (p *pod) command(ctx context.Context, argv ...string) *exec.Cmd {
	sp := []string{p.rootfs, "/usr/bin/setpriv",
		"--reuid=" + strconv.FormatInt(p.uid, 10), "--regid=" + strconv.FormatInt(p.gid, 10), "--clear-groups"}
	sc := p.c.SecurityContext
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		sp = append(sp, "--no-new-privs")
	}
	for _, c := range sc.Capabilities.Drop {
		if c == "ALL" {
			sp = append(sp, "--bounding-set=-all", "--inh-caps=-all")
		}
	}
	sp = append(sp, "--")
	cmd := exec.CommandContext(ctx, "chroot", append(sp, argv...)...)
	cmd.Env = p.env
	cmd.Dir = "/"
	return cmd
}

// start runs the container's main process: the image's entrypoint (or the
// manifest's command) with the manifest's args, logging to a file.
func (p *pod) start(t *testing.T) (cmd *exec.Cmd, exited <-chan error, logs func() string) {
	t.Helper()
	argv := p.c.Command
	if len(argv) == 0 {
		argv = strings.Fields(os.Getenv(entryEnv))
	}
	argv = append(append([]string{}, argv...), p.c.Args...)
	cmd = p.command(context.Background(), argv...)
	logPath := filepath.Join(t.TempDir(), p.name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return cmd, done, func() string { b, _ := os.ReadFile(logPath); return string(b) }
}

// checkProcesses checks the container's farm processes as the kernel sees
// them: started from its root filesystem (the read-only view, if it has
// one), with the pod's user and group, no_new_privs when privilege
// escalation is off, and no capability left when all are dropped.
func (p *pod) checkProcesses(t *testing.T) {
	t.Helper()
	exe := filepath.Join(p.rootfs, "usr/local/bin/farm")
	dirs, _ := os.ReadDir("/proc")
	found := 0
	for _, d := range dirs {
		if e, err := os.Readlink(filepath.Join("/proc", d.Name(), "exe")); err != nil || e != exe {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", d.Name(), "status"))
		if err != nil {
			continue // exited meanwhile
		}
		st := map[string]string{}
		for _, l := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok {
				st[k] = strings.Join(strings.Fields(v), " ")
			}
		}
		found++
		uid, gid := strconv.FormatInt(p.uid, 10), strconv.FormatInt(p.gid, 10)
		if want := strings.Repeat(uid+" ", 3) + uid; st["Uid"] != want {
			t.Errorf("%s: process %s has Uid %q, want %q", p.name, d.Name(), st["Uid"], want)
		}
		if want := strings.Repeat(gid+" ", 3) + gid; st["Gid"] != want || st["Groups"] != "" {
			t.Errorf("%s: process %s has Gid %q, groups %q; want %q and none", p.name, d.Name(), st["Gid"], st["Groups"], want)
		}
		if sc := p.c.SecurityContext; sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation && st["NoNewPrivs"] != "1" {
			t.Errorf("%s: process %s has NoNewPrivs %q, want 1", p.name, d.Name(), st["NoNewPrivs"])
		}
		for _, c := range p.c.SecurityContext.Capabilities.Drop {
			if c == "ALL" && (strings.Trim(st["CapBnd"], "0") != "" || strings.Trim(st["CapEff"], "0") != "") {
				t.Errorf("%s: process %s has CapBnd %s, CapEff %s; want none", p.name, d.Name(), st["CapBnd"], st["CapEff"])
			}
		}
	}
	if found == 0 {
		t.Errorf("%s: no process runs %s", p.name, exe)
	}
	t.Logf("%s: %d farm processes as uid %d, gid %d, from %s", p.name, found, p.uid, p.gid, p.rootfs)
}

// liveness runs the container's exec liveness probe in it, as the kubelet
// would, and returns its error and output.
func (p *pod) liveness(ctx context.Context) (string, error) {
	if p.c.LivenessProbe == nil || p.c.LivenessProbe.Exec == nil {
		return "", nil
	}
	out, err := p.command(ctx, p.c.LivenessProbe.Exec.Command...).CombinedOutput()
	return string(out), err
}

// stop sends SIGTERM and wants exit 0 within the pod's grace period.
func (p *pod) stop(t *testing.T, cmd *exec.Cmd, exited <-chan error, logs func() string) {
	t.Helper()
	grace := 30 * time.Second // Kubernetes' default
	if g := p.spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("%s: after SIGTERM the container's process exited with %v, want 0\n%s", p.name, err, logs())
		}
	case <-time.After(grace):
		t.Fatalf("%s: no exit within terminationGracePeriodSeconds (%v) after SIGTERM\n%s", p.name, grace, logs())
	}
}

// TestImageAsKubernetesPods runs the image the way deploy/kubernetes deploys
// it: the producer and the consumer Deployments' containers, each with its
// manifest's args, environment (secrets and the pod's name resolved),
// user, no_new_privs, no capabilities, and the producer's read-only root
// filesystem, from the image's filesystem under chroot. Only what a cluster
// gives and this machine cannot is overridden, each logged: the database
// and the Service's address (127.0.0.1 here), the producer's listen port
// and the consumer's health port (a pod has a network of its own), and the
// test site's address allowed through the consumer's egress filter. Jobs
// submitted through the producer's API with the API token are assigned by
// the producer, reach the consumer by its long-poll (FARM_WAKE_URL), and
// cross the consumer's process recycles at the manifests' defaults (a fresh
// process every 80 jobs, the successor standing by); the liveness probe
// passes while it works and after; SIGTERM drains both within their grace
// periods.
func TestImageAsKubernetesPods(t *testing.T) {
	prodFile, consFile := os.Getenv(producerManifestEnv), os.Getenv(consumerManifestEnv)
	if os.Getenv(rootfsEnv) == "" || prodFile == "" || consFile == "" {
		t.Skip(rootfsEnv + ", " + producerManifestEnv + " or " + consumerManifestEnv + " not set: run scripts/image-check.sh")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	dbURL, pool := startDB(ctx, t)
	q := jobqueue.New(pool, jobqueue.Config{})
	site := testutil.StartSite(t, testsite.Options{Items: 12})
	secrets := map[string]string{"database-url": dbURL, "api-token": token(t), "read-token": token(t)}

	// The producer; it migrates the database itself.
	apiPort := freePort(t)
	api := fmt.Sprintf("127.0.0.1:%d", apiPort)
	prod := loadPod(t, prodFile, "browserfarm-producer-check", secrets, map[string]string{"FARM_LISTEN": api})
	prodCmd, prodExited, prodLogs := prod.start(t)
	waitReady(ctx, t, prod, api, prodExited, prodLogs)

	// The consumer.
	const node = "browserfarm-consumer-check"
	cons := loadPod(t, consFile, node, secrets, map[string]string{
		"FARM_WAKE_URL":          "http://" + api,
		"FARM_HEALTH_ADDR":       fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"FARM_ALLOW_DESTINATION": strings.TrimPrefix(site.URL, "http://"),
	})
	consCmd, consExited, consLogs := cons.start(t)

	// 170 jobs: two process recycles at the default 80, through the API.
	const jobs, recycles = 170, 2
	var body bytes.Buffer
	body.WriteString("[")
	for i := range jobs {
		if i > 0 {
			body.WriteString(",")
		}
		fmt.Fprintf(&body, `{"url": %q, "wait": {"selector": "#ready"}}`, fmt.Sprintf("%s/page/%d", site.URL, i))
	}
	body.WriteString("]")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+api+"/api/jobs", &body)
	req.Header.Set("Authorization", "Bearer "+secrets["api-token"])
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	respBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var sub struct {
		BatchID string `json:"batch_id"`
	}
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(respBody, &sub) != nil {
		t.Fatalf("POST /api/jobs: %s %s", resp.Status, respBody)
	}

	probed := false
	for {
		c, err := q.BatchCounts(ctx, sub.BatchID)
		if err != nil {
			t.Fatal(err)
		}
		if c.Finished() == jobs {
			if c.By[jobqueue.StateCompleted] != jobs {
				t.Fatalf("batch finished with %v, want all %d completed\n%s", c.By, jobs, consLogs())
			}
			break
		}
		if !probed && c.By[jobqueue.StateCompleted] > 0 {
			// While it works: the probe the kubelet runs every 30 s.
			if out, err := cons.liveness(ctx); err != nil {
				t.Errorf("liveness probe while working: %v\n%s", err, out)
			}
			probed = true
		}
		select {
		case err := <-consExited:
			t.Fatalf("the consumer's container process exited (%v) with %v\n%s", err, c.By, consLogs())
		case err := <-prodExited:
			t.Fatalf("the producer exited (%v)\n%s", err, prodLogs())
		case <-ctx.Done():
			t.Fatalf("jobs not done in time: %v\n%s", c.By, consLogs())
		case <-time.After(200 * time.Millisecond):
		}
	}
	if out, err := cons.liveness(ctx); err != nil {
		t.Errorf("liveness probe after the jobs: %v\n%s", err, out)
	}
	prod.checkProcesses(t)
	cons.checkProcesses(t)
	checkHandoffs(t, consLogs(), recycles)
	t.Logf("%d jobs through the API, the producer and the consumer's long-poll, across %d process recycles with a successor standing by; liveness probe passed",
		jobs, recycles)

	cons.stop(t, consCmd, consExited, consLogs)
	n, err := q.GetNode(ctx, node)
	if err != nil || n.State != jobqueue.NodeExited {
		t.Errorf("node after SIGTERM: %+v, %v; want exited", n, err)
	}
	prod.stop(t, prodCmd, prodExited, prodLogs)
}

// waitReady polls the producer's readiness probe (an httpGet on a named
// port) until it answers 200.
func waitReady(ctx context.Context, t *testing.T, p *pod, addr string, exited <-chan error, logs func() string) {
	t.Helper()
	rp := p.c.ReadinessProbe
	if rp == nil || rp.HTTPGet == nil {
		t.Fatalf("%s: no httpGet readiness probe", p.name)
	}
	u := url.URL{Scheme: "http", Host: addr, Path: rp.HTTPGet.Path}
	for {
		resp, err := http.Get(u.String())
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("%s exited before it was ready (%v)\n%s", p.name, err, logs())
		case <-ctx.Done():
			t.Fatalf("%s not ready in time\n%s", p.name, logs())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func token(t *testing.T) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}
