package install_test

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fencedlease/fencedlease/test/testenv"
)

// instruction is one line of the Dockerfile.
type instruction struct {
	cmd, args string
}

// stage is one FROM of the Dockerfile.
type stage struct {
	from, name string
	steps      []instruction
}

// parseDockerfile reads the subset of the Dockerfile syntax the project's
// Dockerfile uses: FROM, WORKDIR, COPY, ARG, RUN, USER, ENTRYPOINT, with line
// continuations and comments. Any other instruction is an error, so that a
// change to the Dockerfile that the build below does not reproduce fails.
func parseDockerfile(path string) ([]stage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var stages []stage
	var line strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if line.Len() == 0 && (text == "" || strings.HasPrefix(text, "#")) {
			continue
		}
		if strings.HasSuffix(text, "\\") {
			line.WriteString(strings.TrimSuffix(text, "\\") + " ")
			continue
		}
		line.WriteString(text)
		cmd, args, _ := strings.Cut(line.String(), " ")
		line.Reset()
		cmd, args = strings.ToUpper(cmd), strings.TrimSpace(args)
		switch cmd {
		case "FROM":
			from, name, _ := strings.Cut(args, " AS ")
			stages = append(stages, stage{from: strings.TrimSpace(from), name: strings.TrimSpace(name)})
		case "WORKDIR", "COPY", "ARG", "RUN", "USER", "ENTRYPOINT":
			if len(stages) == 0 {
				return nil, fmt.Errorf("%s: %s before FROM", path, cmd)
			}
			s := &stages[len(stages)-1]
			s.steps = append(s.steps, instruction{cmd: cmd, args: args})
		default:
			return nil, fmt.Errorf("%s: instruction %s is not reproduced by test/install: extend buildImage", path, cmd)
		}
	}
	return stages, sc.Err()
}

// builtImage is what the Dockerfile's final stage holds.
type builtImage struct {
	base       string
	user       string
	entrypoint []string
	// files maps a path in the image to the local file built for it.
	files map[string]string
}

// buildImage does what docker build does with the Dockerfile, on this
// machine: each build stage's COPY lines copy the same sources (less
// .dockerignore) into a scratch directory standing for its WORKDIR, and its
// RUN lines run there, unchanged but for the absolute paths, which are moved
// under dir. The final stage's COPY --from lines say which built files the
// image holds.
func buildImage(dir string, buildArgs map[string]string) (*builtImage, error) {
	stages, err := parseDockerfile(filepath.Join(testenv.RepoRoot(), "Dockerfile"))
	if err != nil {
		return nil, err
	}
	if len(stages) < 2 {
		return nil, fmt.Errorf("the Dockerfile has %d stages; want a build stage and a final one", len(stages))
	}
	ignore, err := dockerignore()
	if err != nil {
		return nil, err
	}
	root := filepath.Join(dir, "fs")
	local := func(p string) string { return filepath.Join(root, p) }
	for _, s := range stages[:len(stages)-1] {
		workdir := "/"
		env := os.Environ()
		for _, in := range s.steps {
			switch in.cmd {
			case "WORKDIR":
				workdir = in.args
				if err := os.MkdirAll(local(workdir), 0o755); err != nil {
					return nil, err
				}
			case "ARG":
				name, def, _ := strings.Cut(in.args, "=")
				v, ok := buildArgs[name]
				if !ok {
					v = def
				}
				env = append(env, name+"="+v)
			case "COPY":
				if strings.HasPrefix(in.args, "--") {
					return nil, fmt.Errorf("COPY %s in a build stage is not reproduced by test/install", in.args)
				}
				f := strings.Fields(in.args)
				for _, src := range f[:len(f)-1] {
					// A directory's contents go into dst; a file goes
					// into dst when dst is a directory.
					dst := f[len(f)-1]
					st, err := os.Stat(filepath.Join(testenv.RepoRoot(), src))
					if err != nil {
						return nil, fmt.Errorf("COPY %s: %w", in.args, err)
					}
					if !st.IsDir() && (strings.HasSuffix(dst, "/") || len(f) > 2) {
						dst = filepath.Join(dst, filepath.Base(src))
					}
					if err := copyContext(src, local(filepath.Join(workdir, dst)), ignore); err != nil {
						return nil, err
					}
				}
			case "RUN":
				script := rootAbsolute(in.args, root)
				cmd := exec.CommandContext(context.Background(), "sh", "-c", script)
				cmd.Dir, cmd.Env = local(workdir), env
				if out, err := cmd.CombinedOutput(); err != nil {
					return nil, fmt.Errorf("RUN %s: %w\n%s", in.args, err, out)
				}
			default:
				return nil, fmt.Errorf("%s in a build stage is not reproduced by test/install", in.cmd)
			}
		}
	}
	final := stages[len(stages)-1]
	img := &builtImage{base: final.from, files: map[string]string{}}
	for _, in := range final.steps {
		switch in.cmd {
		case "COPY":
			f := strings.Fields(in.args)
			if len(f) != 3 || !strings.HasPrefix(f[0], "--from=") {
				return nil, fmt.Errorf("final stage: COPY %s: want COPY --from=STAGE SRC DST", in.args)
			}
			img.files[f[2]] = local(f[1])
		case "USER":
			img.user = in.args
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.args), &img.entrypoint); err != nil {
				return nil, fmt.Errorf("ENTRYPOINT %s: want the exec form: %w", in.args, err)
			}
		default:
			return nil, fmt.Errorf("final stage: %s is not reproduced by test/install", in.cmd)
		}
	}
	return img, nil
}

// rootAbsolute moves the absolute paths of a RUN line (/out/manager, ...)
// under root; program names and flags are left alone.
func rootAbsolute(script, root string) string {
	return regexp.MustCompile(`(^|[\s=])(/[A-Za-z0-9_.][^\s"']*)`).ReplaceAllString(script, "${1}"+root+"${2}")
}

func dockerignore() ([]string, error) {
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), ".dockerignore"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(l, "/"), "/"))
		}
	}
	return out, nil
}

// copyContext copies a file or directory of the build context, leaving out
// what .dockerignore names (top-level paths, as in the project's file).
func copyContext(src, dst string, ignore []string) error {
	root := testenv.RepoRoot()
	return filepath.WalkDir(filepath.Join(root, src), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for _, ig := range ignore {
			if rel == ig || strings.HasPrefix(rel, ig+"/") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		inner, _ := filepath.Rel(filepath.Join(root, src), p)
		target := filepath.Join(dst, inner)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}

// TestImageBinariesAreStatic: the distroless static base has no C library,
// so a binary linked against one would not start.
func TestImageBinariesAreStatic(t *testing.T) {
	g := NewWithT(t)
	g.Expect(image.files).To(HaveKey("/manager"))
	g.Expect(image.files).To(HaveKey("/fence"))
	for path, file := range image.files {
		f, err := elf.Open(file)
		g.Expect(err).NotTo(HaveOccurred(), path)
		for _, p := range f.Progs {
			g.Expect(p.Type).NotTo(Equal(elf.PT_INTERP), "%s is dynamically linked", path)
			g.Expect(p.Type).NotTo(Equal(elf.PT_DYNAMIC), "%s is dynamically linked", path)
		}
		f.Close()
	}
	out, err := exec.Command(image.files["/fence"], "version").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	g.Expect(strings.TrimSpace(string(out))).To(ContainSubstring(imageVersion), "the VERSION build argument reaches the fence binary")
}

// TestImageRunsAsTheManifestsSay: the final stage is distroless and
// non-root, and the chart and config/default run what the image holds, as
// the user the image runs as.
func TestImageRunsAsTheManifestsSay(t *testing.T) {
	g := NewWithT(t)
	g.Expect(image.base).To(Equal("gcr.io/distroless/static:nonroot"))
	g.Expect(image.user).To(Equal("65532:65532"))
	g.Expect(image.entrypoint).To(Equal([]string{"/manager"}))

	for source, manifests := range map[string]string{
		"chart":          renderChart(t, defaultRelease, defaultNamespace),
		"config/default": renderKustomize(t),
	} {
		dep := find(t, decode(t, manifests), "Deployment", "fencedlease-controller-manager")
		var d struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(dep.Object, &d)).To(Succeed())
		pod := d.Spec.Template.Spec
		g.Expect(pod.Containers).To(HaveLen(1), source)
		g.Expect(image.files).To(HaveKey(pod.Containers[0].Command[0]), "%s runs %s, which the image does not hold", source, pod.Containers[0].Command[0])
		g.Expect(*pod.SecurityContext.RunAsUser).To(BeEquivalentTo(65532), source)
		g.Expect(*pod.SecurityContext.RunAsGroup).To(BeEquivalentTo(65532), source)
	}
}

// TestImageGoVersion: the build stage's Go is at least the one go.mod asks
// for.
func TestImageGoVersion(t *testing.T) {
	g := NewWithT(t)
	stages, err := parseDockerfile(repoPath("Dockerfile"))
	g.Expect(err).NotTo(HaveOccurred())
	m := regexp.MustCompile(`^golang:(\d+)\.(\d+)`).FindStringSubmatch(stages[0].from)
	g.Expect(m).NotTo(BeNil(), "build stage FROM %s is not a golang image", stages[0].from)
	mod, err := os.ReadFile(repoPath("go.mod"))
	g.Expect(err).NotTo(HaveOccurred())
	want := regexp.MustCompile(`(?m)^go (\d+)\.(\d+)`).FindStringSubmatch(string(mod))
	g.Expect(want).NotTo(BeNil())
	num := func(s string) int {
		n, err := strconv.Atoi(s)
		g.Expect(err).NotTo(HaveOccurred())
		return n
	}
	img, mod2 := [2]int{num(m[1]), num(m[2])}, [2]int{num(want[1]), num(want[2])}
	g.Expect(img[0] > mod2[0] || (img[0] == mod2[0] && img[1] >= mod2[1])).To(BeTrue(), "image Go %s.%s is older than go.mod's %s.%s", m[1], m[2], want[1], want[2])
}
