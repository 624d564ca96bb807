package fencetest_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/pkg/fence/fencetest"
)

// TestKubeletWriterLayout checks the writer reproduces the kubelet's layout,
// which the consistency of Read depends on.
func TestKubeletWriterLayout(t *testing.T) {
	g := NewWithT(t)
	k, err := fencetest.NewKubeletWriter(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k.Holder(1, "db")).To(Succeed())
	first, err := os.Readlink(filepath.Join(k.Dir(), "..data"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first).To(MatchRegexp(`^\.\.\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}\.\d+$`))
	for _, name := range []string{"fence", "role", "lease"} {
		g.Expect(os.Readlink(filepath.Join(k.Dir(), name))).To(Equal(filepath.Join("..data", name)))
	}

	g.Expect(k.Standby("db")).To(Succeed())
	second, err := os.Readlink(filepath.Join(k.Dir(), "..data"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(second).NotTo(Equal(first))
	g.Expect(filepath.Join(k.Dir(), first)).NotTo(BeAnExistingFile())
	g.Expect(filepath.Join(k.Dir(), "..data_tmp")).NotTo(BeAnExistingFile())
	entries, err := os.ReadDir(k.Dir())
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	g.Expect(names).To(ConsistOf(second, "..data", "fence", "lease", "role"))
}
