package fencedlease_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

func TestInvalidSpecsAreRejectedByTheAPI(t *testing.T) {
	f := newFixture(t)
	valid := func() *fencingv1alpha1.FencedLease {
		return &fencingv1alpha1.FencedLease{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, GenerateName: "bad-"},
			Spec: fencingv1alpha1.FencedLeaseSpec{
				Selector:             metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
				LeaseDurationSeconds: 15,
			},
		}
	}
	tests := []struct {
		name   string
		mutate func(*fencingv1alpha1.FencedLease)
		want   string
	}{
		{"empty selector", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Selector = metav1.LabelSelector{} },
			"spec.selector: Invalid value: selector must not be empty: set matchLabels or matchExpressions"},
		{"lease duration too long", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.LeaseDurationSeconds = 3601 },
			"spec.leaseDurationSeconds: Invalid value: 3601: spec.leaseDurationSeconds in body should be less than or equal to 3600"},
		{"negative lease duration", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.LeaseDurationSeconds = -1 },
			"spec.leaseDurationSeconds: Invalid value: -1: spec.leaseDurationSeconds in body should be greater than or equal to 1"},
		{"renew interval not shorter than the lease", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.RenewIntervalSeconds = ptr.To[int32](15) },
			"spec: Invalid value: renewIntervalSeconds must be less than leaseDurationSeconds"},
		{"max hold shorter than the lease", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.MaxHoldSeconds = 5 },
			"spec: Invalid value: maxHoldSeconds must be 0 (unlimited) or at least leaseDurationSeconds"},
		{"unknown takeover", func(fl *fencingv1alpha1.FencedLease) { fl.Spec.Takeover = "Sometimes" },
			"spec.takeover: Unsupported value: \"Sometimes\": supported values: \"Safe\", \"Immediate\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			fl := valid()
			tt.mutate(fl)
			err := f.c.Create(f.ctx, fl)
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(tt.want))
		})
	}
	// Nothing was created.
	var list fencingv1alpha1.FencedLeaseList
	f.g.Expect(f.c.List(f.ctx, &list)).To(Succeed())
	for _, fl := range list.Items {
		f.g.Expect(fl.Namespace).NotTo(Equal(f.ns))
	}

	// Defaults are applied to what is left out.
	fl := valid()
	fl.Spec.LeaseDurationSeconds = 0
	f.g.Expect(f.c.Create(f.ctx, fl)).To(Succeed())
	f.g.Expect(fl.Spec.LeaseDurationSeconds).To(Equal(int32(15)))
	f.g.Expect(fl.Spec.Takeover).To(Equal(fencingv1alpha1.TakeoverSafe))
}

func TestKubectlApplyShowsWhyASpecIsInvalid(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	user, err := env.AddUser(envtestAdmin(), nil)
	f.g.Expect(err).NotTo(HaveOccurred())
	data, err := user.KubeConfig()
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(os.WriteFile(kubeconfig, data, 0o600)).To(Succeed())
	manifest := filepath.Join(dir, "bad.yaml")
	f.g.Expect(os.WriteFile(manifest, []byte(`apiVersion: fencing.fencedlease.io/v1alpha1
kind: FencedLease
metadata:
  name: reports
  namespace: `+f.ns+`
spec:
  selector: {}
  leaseDurationSeconds: 10
  renewIntervalSeconds: 10
`), 0o600)).To(Succeed())
	kubectl := filepath.Join(env.BinaryAssetsDirectory, "kubectl")

	// The API's doc comments are what kubectl explain shows.
	f.g.Eventually(func() (string, error) {
		out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "explain", "fencedlease.spec.takeover").CombinedOutput()
		return string(out), err
	}).WithTimeout(timeout).Should(And(
		ContainSubstring("GROUP:      fencing.fencedlease.io"),
		ContainSubstring("takeover says when a new holder may be granted after the current one"),
	))

	out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "apply", "-f", manifest).CombinedOutput()
	f.g.Expect(err).To(HaveOccurred(), "kubectl apply must fail: %s", out)
	msg := string(out)
	f.g.Expect(msg).To(ContainSubstring(`The FencedLease "reports" is invalid`))
	f.g.Expect(msg).To(ContainSubstring("selector must not be empty: set matchLabels or matchExpressions"))
	f.g.Expect(msg).To(ContainSubstring("renewIntervalSeconds must be less than leaseDurationSeconds"))
}
