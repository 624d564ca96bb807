// Command images builds the local cluster's container images as OCI image
// tarballs, without a Docker engine or a registry: the operator's (the
// Dockerfile's contents, user and entrypoint), the example fenced
// controller's, the sandbox's pause image, and the workload image (fence
// and a static busybox shell). The real
// nodes' containerd imports them (ctr images import).
//
//	go run . -repo ../../.. -out DIR [image...]
//
// It lives in a module of its own so that go-containerregistry stays out of
// the product's go.mod.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	repo := flag.String("repo", ".", "Root of the fencedlease repository (whose commands are built).")
	out := flag.String("out", "bin/images", "Directory of the image tarballs (<name>.tar).")
	flag.Parse()
	names := flag.Args()
	if len(names) == 0 {
		for _, d := range Definitions() {
			names = append(names, d.Name)
		}
	}
	root, err := filepath.Abs(*repo)
	if err != nil {
		fail(err)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	for _, n := range names {
		d, ok := Lookup(n)
		if !ok {
			fail(fmt.Errorf("no image named %q", n))
		}
		path := filepath.Join(*out, d.Name+".tar")
		if err := Build(d, root, path); err != nil {
			fail(fmt.Errorf("image %s: %w", d.Name, err))
		}
		fmt.Printf("%s %s\n", d.Ref, path)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "images:", err)
	os.Exit(1)
}
