package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// scaledObject mirrors KEDA's keda.sh/v1alpha1 ScaledObject (spec fields as
// in kedacore/keda apis/keda/v1alpha1/scaledobject_types.go and
// scaletriggers_types.go). KEDA's own Go module pulls in controller-runtime
// and much of Kubernetes' client side; this copy of the schema keeps the
// check strict without that.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		ScaleTargetRef *struct {
			Name                   string `json:"name"`
			APIVersion             string `json:"apiVersion,omitempty"`
			Kind                   string `json:"kind,omitempty"`
			EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
		} `json:"scaleTargetRef"`
		PollingInterval       *int32 `json:"pollingInterval,omitempty"`
		InitialCooldownPeriod *int32 `json:"initialCooldownPeriod,omitempty"`
		CooldownPeriod        *int32 `json:"cooldownPeriod,omitempty"`
		IdleReplicaCount      *int32 `json:"idleReplicaCount,omitempty"`
		MinReplicaCount       *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount       *int32 `json:"maxReplicaCount,omitempty"`
		Advanced              *struct {
			HorizontalPodAutoscalerConfig *struct {
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
				Name     string                                         `json:"name,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
			RestoreToOriginalReplicaCount bool `json:"restoreToOriginalReplicaCount,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []struct {
			Type              string            `json:"type"`
			Name              string            `json:"name,omitempty"`
			UseCachedMetrics  bool              `json:"useCachedMetrics,omitempty"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind,omitempty"`
			} `json:"authenticationRef,omitempty"`
			MetricType autoscalingv2.MetricTargetType `json:"metricType,omitempty"`
		} `json:"triggers"`
		Fallback *struct {
			FailureThreshold int32  `json:"failureThreshold"`
			Replicas         int32  `json:"replicas"`
			Behavior         string `json:"behavior,omitempty"`
		} `json:"fallback,omitempty"`
	} `json:"spec"`
}

// respawnStopGrace mirrors cmd/farm's: past --drain-timeout, the respawn
// parent gives the consumer this long to hand its jobs back.
const respawnStopGrace = 30 * time.Second

// object is one decoded manifest.
type object struct {
	file string
	kind string
	obj  any
}

// decodeAll reads every manifest and decodes each document strictly into the
// type its apiVersion and kind name: an unknown or misspelt field, or a
// duplicate key, is an error.
func decodeAll(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	keda, _ := filepath.Glob("keda/*.yaml")
	files = append(files, keda...)
	if len(files) < 5 {
		t.Fatalf("found only %v", files)
	}
	var out []object
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(data, []byte("\n---\n")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			o, err := decode(doc)
			if err != nil {
				t.Errorf("%s document %d: %v", f, i+1, err)
				continue
			}
			out = append(out, object{file: f, kind: o.kind, obj: o.obj})
		}
	}
	return out
}

func decode(doc []byte) (object, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return object{}, err
	}
	var obj any
	switch tm.APIVersion + "/" + tm.Kind {
	case "v1/Namespace":
		obj = &corev1.Namespace{}
	case "v1/Secret":
		obj = &corev1.Secret{}
	case "v1/Service":
		obj = &corev1.Service{}
	case "apps/v1/Deployment":
		obj = &appsv1.Deployment{}
	case "keda.sh/v1alpha1/ScaledObject":
		obj = &scaledObject{}
	default:
		return object{}, fmt.Errorf("unexpected apiVersion %q kind %q", tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return object{}, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return object{kind: tm.Kind, obj: obj}, nil
}

func TestStrictDecodeCatchesMisspeltFields(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 2\n",
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      terminationGracePeriod: 10\n",
		"apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec:\n  scaleTargetRef: {name: y}\n  minReplicas: 0\n",
		"apiVersion: v1\nkind: Secret\nmetadata: {name: x}\nstringData: {a: b}\nstringData: {c: d}\n",
	} {
		if _, err := decode([]byte(doc)); err == nil {
			t.Errorf("decoded without error:\n%s", doc)
		}
	}
}

func TestManifests(t *testing.T) {
	objs := decodeAll(t)
	byName := map[string]any{}
	for _, o := range objs {
		var meta metav1.Object
		switch v := o.obj.(type) {
		case *corev1.Namespace:
			meta = v
		case *corev1.Secret:
			meta = v
		case *corev1.Service:
			meta = v
		case *appsv1.Deployment:
			meta = v
		case *scaledObject:
			meta = v
		}
		if o.kind != "Namespace" && meta.GetNamespace() != "browserfarm" {
			t.Errorf("%s %s: namespace %q, want browserfarm", o.kind, meta.GetName(), meta.GetNamespace())
		}
		byName[o.kind+"/"+meta.GetName()] = o.obj
	}
	secret, ok := byName["Secret/browserfarm"].(*corev1.Secret)
	if !ok {
		t.Fatalf("no Secret browserfarm among %v", keys(byName))
	}
	producer, ok := byName["Deployment/browserfarm-producer"].(*appsv1.Deployment)
	if !ok {
		t.Fatal("no producer Deployment")
	}
	consumer, ok := byName["Deployment/browserfarm-consumer"].(*appsv1.Deployment)
	if !ok {
		t.Fatal("no consumer Deployment")
	}

	// Producer: leader + standby, ready on /readyz, scraped.
	if producer.Spec.Replicas == nil || *producer.Spec.Replicas != 2 {
		t.Errorf("producer replicas = %v, want 2 (leader and standby)", producer.Spec.Replicas)
	}
	pc := onlyContainer(t, producer)
	if pc.ReadinessProbe == nil || pc.ReadinessProbe.HTTPGet == nil || pc.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("producer readiness probe = %+v, want GET /readyz", pc.ReadinessProbe)
	}
	ann := producer.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" || ann["prometheus.io/port"] != "8080" {
		t.Errorf("producer scrape annotations = %v", ann)
	}
	if env(pc, "FARM_LISTEN") != "0.0.0.0:8080" {
		t.Errorf("producer FARM_LISTEN = %q, want 0.0.0.0:8080 (the probes and the Service reach it)", env(pc, "FARM_LISTEN"))
	}

	// Consumer: respawn mode, and a grace period the drain fits in.
	cc := onlyContainer(t, consumer)
	if env(cc, "FARM_RESPAWN") != "true" {
		t.Errorf("consumer FARM_RESPAWN = %q, want true", env(cc, "FARM_RESPAWN"))
	}
	drain, err := time.ParseDuration(env(cc, "FARM_DRAIN_TIMEOUT"))
	if err != nil {
		t.Fatalf("consumer FARM_DRAIN_TIMEOUT: %v", err)
	}
	grace := consumer.Spec.Template.Spec.TerminationGracePeriodSeconds
	if grace == nil || time.Duration(*grace)*time.Second <= drain+respawnStopGrace {
		t.Errorf("consumer terminationGracePeriodSeconds = %v, want above drain %v + hand-back %v", grace, drain, respawnStopGrace)
	}
	if cc.LivenessProbe == nil || cc.LivenessProbe.Exec == nil || strings.Join(cc.LivenessProbe.Exec.Command, " ") != "farm health" {
		t.Errorf("consumer liveness probe = %+v, want exec farm health", cc.LivenessProbe)
	}

	// The liveness probes wait for startup probes whose window outlasts
	// what a start may take: the consumer's database wait (its health
	// endpoint listens after it), the producer's migration (it listens
	// after it; killing it rolls the migration back).
	wait, err := time.ParseDuration(env(cc, "FARM_DATABASE_WAIT"))
	if err != nil {
		t.Fatalf("consumer FARM_DATABASE_WAIT: %v", err)
	}
	for _, w := range []struct {
		who    string
		c      corev1.Container
		needed time.Duration
	}{{"consumer", cc, wait + time.Minute}, {"producer", pc, 10 * time.Minute}} {
		p := w.c.StartupProbe
		if p == nil {
			t.Errorf("%s: no startup probe: the liveness probe kills a start that waits for the database or migrates", w.who)
			continue
		}
		if window := time.Duration(p.PeriodSeconds*p.FailureThreshold) * time.Second; window < w.needed {
			t.Errorf("%s: the startup probe gives up after %v, want at least %v", w.who, window, w.needed)
		}
		if l := w.c.LivenessProbe; l == nil || l.InitialDelaySeconds != 0 {
			t.Errorf("%s: liveness probe %+v: the startup probe holds it off, no initial delay needed", w.who, l)
		}
	}

	// Both read the database URL (and the producer the token) from the Secret's keys.
	for _, c := range []corev1.Container{pc, cc} {
		for _, e := range c.Env {
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				continue
			}
			ref := e.ValueFrom.SecretKeyRef
			if _, ok := secret.StringData[ref.Key]; ref.Name != secret.Name || !ok {
				t.Errorf("%s: %s refers to secret %s key %s, which the Secret does not hold", c.Name, e.Name, ref.Name, ref.Key)
			}
		}
	}
	if envFrom(pc, "FARM_DATABASE_URL") == nil || envFrom(pc, "FARM_API_TOKEN") == nil || envFrom(cc, "FARM_DATABASE_URL") == nil {
		t.Error("the database URL and API token must come from the Secret")
	}

	// The consumers are woken by the producer Service, with the token its
	// reads need (it listens beyond loopback).
	svc, ok := byName["Service/browserfarm-producer"].(*corev1.Service)
	if !ok {
		t.Fatal("no producer Service")
	}
	wantWake := fmt.Sprintf("http://%s.%s.svc:%d", svc.Name, svc.Namespace, svc.Spec.Ports[0].Port)
	if env(cc, "FARM_WAKE_URL") != wantWake {
		t.Errorf("consumer FARM_WAKE_URL = %q, want the producer Service %s", env(cc, "FARM_WAKE_URL"), wantWake)
	}
	rt, wt := envFrom(pc, "FARM_READ_TOKEN"), envFrom(cc, "FARM_WAKE_TOKEN")
	if rt == nil || wt == nil || rt.SecretKeyRef == nil || wt.SecretKeyRef == nil || rt.SecretKeyRef.Key != wt.SecretKeyRef.Key {
		t.Errorf("consumer FARM_WAKE_TOKEN (%+v) must be the producer's FARM_READ_TOKEN (%+v), from the Secret", wt, rt)
	}

	// The ScaledObject scales the consumer Deployment on the producer's desired count.
	so, ok := byName["ScaledObject/browserfarm-consumer"].(*scaledObject)
	if !ok {
		t.Fatal("no ScaledObject")
	}
	if so.Spec.ScaleTargetRef == nil || so.Spec.ScaleTargetRef.Name != consumer.Name {
		t.Errorf("ScaledObject targets %+v, want %s", so.Spec.ScaleTargetRef, consumer.Name)
	}
	if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "prometheus" ||
		!strings.Contains(so.Spec.Triggers[0].Metadata["query"], "browserfarm_desired_nodes") ||
		so.Spec.Triggers[0].Metadata["serverAddress"] == "" || so.Spec.Triggers[0].Metadata["threshold"] != "1" {
		t.Errorf("ScaledObject triggers = %+v", so.Spec.Triggers)
	}
	// While no producer leads the gauge is absent: an error, not a 0, and
	// the fallback keeps the fleet as it is.
	if len(so.Spec.Triggers) == 1 && so.Spec.Triggers[0].Metadata["ignoreNullValues"] != "false" {
		t.Errorf("ScaledObject trigger ignoreNullValues = %q, want \"false\" (an empty query is no count)", so.Spec.Triggers[0].Metadata["ignoreNullValues"])
	}
	if fb := so.Spec.Fallback; fb == nil || fb.Behavior != "currentReplicas" || fb.FailureThreshold < 1 {
		t.Errorf("ScaledObject fallback = %+v, want behavior currentReplicas", fb)
	}
}

func onlyContainer(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	cs := d.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("%s: %d containers, want 1", d.Name, len(cs))
	}
	if d.Spec.Selector == nil || d.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != d.Spec.Template.Labels["app.kubernetes.io/name"] {
		t.Errorf("%s: selector %v does not match the pod labels %v", d.Name, d.Spec.Selector, d.Spec.Template.Labels)
	}
	return cs[0]
}

func env(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func envFrom(c corev1.Container, name string) *corev1.EnvVarSource {
	for _, e := range c.Env {
		if e.Name == name {
			return e.ValueFrom
		}
	}
	return nil
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
