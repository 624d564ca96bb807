package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Binary is a Go command built static into the image at Path.
type Binary struct {
	// Package is the command, relative to Dir (e.g. ./cmd/manager).
	Package string
	// Dir is where it builds from, relative to the repository's root: the
	// module that holds it.
	Dir string
	// Path is where it lands in the image.
	Path string
	// Version stamps main.version, as the Dockerfile's VERSION does.
	Version bool
}

// File is a file of the machine copied into the image.
type File struct{ From, Path string }

// Definition is one image.
type Definition struct {
	Name       string
	Ref        string
	Binaries   []Binary
	Files      []File
	Links      map[string]string
	User       string
	Entrypoint []string
}

// Definitions are the images the local cluster runs. operator is the
// Dockerfile's image (TestOperatorImageMatchesDockerfile compares them).
func Definitions() []Definition {
	bb := map[string]string{}
	for _, applet := range []string{"sh", "cat", "echo", "sleep", "ls", "date", "test", "kill", "env", "grep", "wc", "true", "false"} {
		bb["/bin/"+applet] = "busybox"
	}
	return []Definition{
		{
			Name: "operator", Ref: "ghcr.io/fencedlease/fencedlease:dev",
			Binaries: []Binary{
				{Package: "./cmd/manager", Path: "/manager", Version: true},
				{Package: "./cmd/fence", Path: "/fence", Version: true},
				{Package: "./cmd/fence-gateway", Path: "/fence-gateway"},
			},
			User: "65532:65532", Entrypoint: []string{"/manager"},
		},
		{
			// The example fenced controller, under the name its manifest
			// (examples/fenced-controller/config/deploy) gives it.
			Name: "fenced-controller", Ref: "example.com/widget-controller:dev",
			Binaries:   []Binary{{Package: "./examples/fenced-controller", Path: "/fenced-controller"}},
			User:       "65532:65532",
			Entrypoint: []string{"/fenced-controller"},
		},
		{
			Name: "pause", Ref: "fencedlease.local/pause:dev",
			Binaries:   []Binary{{Package: "./pause", Dir: "hack/tools/images", Path: "/pause"}},
			User:       "65535:65535",
			Entrypoint: []string{"/pause"},
		},
		{
			// client-go's leader election, for the benchmark beside it
			// (test/elector).
			Name: "elector", Ref: "fencedlease.local/elector:dev",
			Binaries:   []Binary{{Package: "./test/elector", Path: "/elector"}},
			User:       "65532:65532",
			Entrypoint: []string{"/elector"},
		},
		{
			Name: "workload", Ref: "fencedlease.local/workload:dev",
			Binaries:   []Binary{{Package: "./cmd/fence", Path: "/fence", Version: true}},
			Files:      []File{{From: "/bin/busybox", Path: "/bin/busybox"}},
			Links:      bb,
			User:       "65532:65532",
			Entrypoint: []string{"/bin/sh"},
		},
	}
}

// Lookup returns the definition named name.
func Lookup(n string) (Definition, bool) {
	for _, d := range Definitions() {
		if d.Name == n {
			return d, true
		}
	}
	return Definition{}, false
}

// Build builds d's binaries from the repository at root and writes the
// image as a tarball at path.
func Build(d Definition, root, path string) error {
	tmp, err := os.MkdirTemp("", "image-"+d.Name)
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	entries := map[string]string{}
	for _, b := range d.Binaries {
		out := filepath.Join(tmp, filepath.Base(b.Path))
		ldflags := "-s -w"
		if b.Version {
			ldflags += " -X main.version=dev"
		}
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, b.Package)
		cmd.Dir = filepath.Join(root, b.Dir)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", b.Package, err, msg)
		}
		entries[b.Path] = out
	}
	for _, f := range d.Files {
		entries[f.Path] = f.From
	}
	layer, err := layerOf(entries, d.Links)
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.User = d.User
	cf.Config.Entrypoint = d.Entrypoint
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
	}
	ref, err := name.NewTag(d.Ref)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(path, ref, img)
}

// layerOf is one layer holding the files (image path -> file of the
// machine), executable, owned by root, and the symbolic links.
func layerOf(files, links map[string]string) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	var paths []string
	for p := range files {
		paths = append(paths, p)
	}
	for p := range links {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	epoch := time.Unix(0, 0)
	for _, p := range paths {
		if d := filepath.Dir(p); d != "/" && !dirs[d] {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return nil, err
			}
		}
		if target, ok := links[p]; ok {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: p[1:], Linkname: target, Mode: 0o777, ModTime: epoch}); err != nil {
				return nil, err
			}
			continue
		}
		b, err := os.ReadFile(files[p])
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p[1:], Mode: 0o755, Size: int64(len(b)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}
