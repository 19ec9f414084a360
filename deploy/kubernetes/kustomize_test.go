package kubernetes

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// TestKustomization renders kustomization.yaml as `kubectl apply -k` does
// (kustomize's own library): every manifest but the Secret, both
// Deployments on the image it names, so that an apply keeps the operator's
// image rather than the files' placeholder.
func TestKustomization(t *testing.T) {
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k types.Kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" || f == "01-secret.yaml" })
	if got := slices.Sorted(slices.Values(k.Resources)); !slices.Equal(got, want) {
		t.Errorf("kustomization resources %v, want every manifest but the Secret: %v", got, want)
	}
	if len(k.Images) != 1 || k.Images[0].Name != "browserfarm" {
		t.Fatalf("kustomization images %+v, want one, named browserfarm", k.Images)
	}
	image := k.Images[0].NewName + ":" + k.Images[0].NewTag

	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	deployments := 0
	for i, doc := range bytes.Split(out, []byte("\n---\n")) {
		o, err := decode(doc)
		if err != nil {
			t.Fatalf("rendered document %d: %v", i+1, err)
		}
		if o.kind == "Secret" {
			t.Errorf("the rendered set holds a Secret: an apply would overwrite the real tokens")
		}
		d, ok := o.obj.(*appsv1.Deployment)
		if !ok {
			continue
		}
		deployments++
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Image != image {
				t.Errorf("%s container %s: image %q, want %q", d.Name, c.Name, c.Image, image)
			}
		}
	}
	if deployments != 2 {
		t.Errorf("rendered %d Deployments, want the producer's and the consumers'", deployments)
	}
}
