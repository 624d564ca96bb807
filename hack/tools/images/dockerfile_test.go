package main

import (
	"archive/tar"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// dockerImage is what the Dockerfile's final stage says of its image.
type dockerImage struct {
	// files maps each path in the image to the package built into it.
	files      map[string]string
	user       string
	entrypoint []string
}

var (
	buildLine  = regexp.MustCompile(`-o /out/(\S+) (\./\S+)`)
	copyLine   = regexp.MustCompile(`^COPY --from=build /out/(\S+) (\S+)$`)
	entryPoint = regexp.MustCompile(`^ENTRYPOINT \[(.*)\]$`)
)

// parseDockerfile reads the final stage of the Dockerfile: the binaries it
// copies (and the packages the build stage builds them from), its USER and
// its ENTRYPOINT.
func parseDockerfile(text string) (dockerImage, error) {
	built := map[string]string{}
	for _, m := range buildLine.FindAllStringSubmatch(text, -1) {
		built[m[1]] = m[2]
	}
	img := dockerImage{files: map[string]string{}}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if m := copyLine.FindStringSubmatch(line); m != nil {
			pkg, ok := built[m[1]]
			if !ok {
				return img, errors.New("the Dockerfile copies /out/" + m[1] + ", which its build stage does not build")
			}
			img.files[m[2]] = pkg
		}
		if u, ok := strings.CutPrefix(line, "USER "); ok {
			img.user = u
		}
		if m := entryPoint.FindStringSubmatch(line); m != nil {
			for _, a := range strings.Split(m[1], ",") {
				img.entrypoint = append(img.entrypoint, strings.Trim(strings.TrimSpace(a), `"`))
			}
		}
	}
	if len(img.files) == 0 || img.user == "" || len(img.entrypoint) == 0 {
		return img, errors.New("the Dockerfile's final stage names no binary, USER or ENTRYPOINT")
	}
	return img, nil
}

// TestOperatorImageMatchesDockerfile: the operator image built here has
// exactly the files the Dockerfile's final stage copies, built from the
// same packages, and the Dockerfile's user and entrypoint, as its config
// and its layer say (the tarball is built and read back).
func TestOperatorImageMatchesDockerfile(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := parseDockerfile(string(text))
	if err != nil {
		t.Fatal(err)
	}
	def, ok := Lookup("operator")
	if !ok {
		t.Fatal("no operator image")
	}
	got := map[string]string{}
	for _, b := range def.Binaries {
		got[b.Path] = b.Package
	}
	if !maps.Equal(got, want.files) || len(def.Files) != 0 || len(def.Links) != 0 {
		t.Errorf("the operator image's files %v (and %v %v), the Dockerfile's %v", got, def.Files, def.Links, want.files)
	}

	if testing.Short() {
		t.Skip("the image build: skipped with -short")
	}
	path := filepath.Join(t.TempDir(), "operator.tar")
	if err := Build(def, root, path); err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != want.user {
		t.Errorf("image user %q, the Dockerfile's %q", cf.Config.User, want.user)
	}
	if strings.Join(cf.Config.Entrypoint, " ") != strings.Join(want.entrypoint, " ") {
		t.Errorf("image entrypoint %q, the Dockerfile's %q", cf.Config.Entrypoint, want.entrypoint)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("image platform %s/%s", cf.OS, cf.Architecture)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var inImage []string
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				inImage = append(inImage, "/"+h.Name)
				if h.Mode&0o111 == 0 || h.Uid != 0 {
					t.Errorf("%s: mode %o uid %d, want executable and root's", h.Name, h.Mode, h.Uid)
				}
			}
		}
		rc.Close()
	}
	var wantFiles []string
	for p := range want.files {
		wantFiles = append(wantFiles, p)
	}
	sort.Strings(inImage)
	sort.Strings(wantFiles)
	if strings.Join(inImage, " ") != strings.Join(wantFiles, " ") {
		t.Errorf("files in the image %v, the Dockerfile copies %v", inImage, wantFiles)
	}
}

// TestParseDockerfileRefusesACopyOfNothingBuilt: a COPY of a binary that the
// build stage does not build is an error, not an image without it.
func TestParseDockerfileRefusesACopyOfNothingBuilt(t *testing.T) {
	text := "RUN go build -o /out/manager ./cmd/manager\nCOPY --from=build /out/fence /fence\nUSER 1:1\nENTRYPOINT [\"/fence\"]\n"
	if _, err := parseDockerfile(text); err == nil {
		t.Fatal("a Dockerfile copying /out/fence, never built, was accepted")
	}
}
