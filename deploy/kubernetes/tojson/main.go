// Command tojson prints a manifest of this directory as JSON, one document
// per line, for scripts/image-check.sh: its pod check (internal/imagecheck)
// runs the image the way these manifests deploy it and reads their pod
// templates from here, so that the check follows the manifests as they are.
//
//	go run ./tojson 20-consumer.yaml
package main

import (
	"bytes"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: tojson MANIFEST.yaml")
		os.Exit(2)
	}
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "tojson:", err)
		os.Exit(1)
	}
	for i, doc := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			fmt.Fprintf(os.Stderr, "tojson: %s, document %d: %v\n", os.Args[1], i+1, err)
			os.Exit(1)
		}
		if string(j) == "null" { // a document of comments only
			continue
		}
		fmt.Printf("%s\n", j)
	}
}
