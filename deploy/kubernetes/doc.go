// Package kubernetes holds browserfarm's Kubernetes manifests (the YAML files
// in this directory, and the optional KEDA ScaledObject in keda/) and the
// test that decodes each of them strictly into the Kubernetes API types, so
// that a misspelt or misplaced field fails `go test` here rather than
// `kubectl apply` in production, and the test that renders
// kustomization.yaml (the image, set once) with kustomize's library. It is a
// module of its own so that the farm binary never links k8s.io or kustomize.
package kubernetes
