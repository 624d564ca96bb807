package policy_test

import (
	"fmt"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/internal/policy"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestPodBoundTokens: the built-in edit role lets a namespace editor request
// a token bound to the holder pod and so write as the holder; the opt-in
// policy of config/policy/optional leaves that to kubelets, and leaves
// tokens that are not bound to a pod alone. It is not installed by default.
// It runs alone: while the policy is installed, the tests cannot play the
// kubelet that mints their pods' tokens.
func TestPodBoundTokens(t *testing.T) {
	f := newSerialFixture(t)
	sa := &corev1.ServiceAccount{}
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "default"}, sa)).To(Succeed())
	bound := func() *authenticationv1.TokenRequest {
		return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "a", UID: f.a.UID}}}
	}
	unbound := func() *authenticationv1.TokenRequest {
		return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
	}

	// Without the policy: the editor gets a token of the holder pod.
	tr := bound()
	f.g.Expect(f.editor.c.SubResource("token").Create(f.ctx, sa, tr)).To(Succeed())
	f.g.Expect(tr.Status.Token).NotTo(BeEmpty())

	file := filepath.Join(testenv.RepoRoot(), "config", "policy", "optional", "pod-bound-tokens.yaml")
	f.g.Expect(testenv.InstallPolicies(f.ctx, f.c, file)).To(Succeed())
	t.Cleanup(func() {
		// Gone a moment after it is deleted: the tests after this one mint
		// their pods' tokens as an administrator again.
		f.g.Expect(testenv.RemovePolicies(f.ctx, f.c, file)).To(Succeed())
		f.g.Eventually(func() error { return f.c.SubResource("token").Create(f.ctx, sa, bound()) }).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})
	want := fmt.Sprintf(`serviceaccounts "default" is forbidden: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: `+
		`a token of service account %s/default bound to pod a may be requested by a kubelet only, not by user "erin"`,
		policy.PodBoundTokens, policy.PodBoundTokens, f.ns)
	// In force a moment after it is created.
	f.g.Eventually(func() error { return f.editor.c.SubResource("token").Create(f.ctx, sa, bound()) }).
		WithTimeout(timeout).WithPolling(poll).Should(MatchError(want))
	err := f.editor.c.SubResource("token").Create(f.ctx, sa, bound())
	f.g.Expect(apierrors.IsForbidden(err)).To(BeTrue())
	f.g.Expect(f.editor.c.SubResource("token").Create(f.ctx, sa, unbound())).To(Succeed())

	// The kubelet of the pod's node.
	kubelet := f.user("system:node:node-1", "system:nodes")
	tr = bound()
	f.g.Expect(kubelet.SubResource("token").Create(f.ctx, sa, tr)).To(Succeed())
	f.g.Expect(tr.Status.Token).NotTo(BeEmpty())
}
