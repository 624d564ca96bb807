//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestDeletingAnUnprotectedOwnerCannotDeleteAProtectedObject (issue 43,
// finding 4), with the real garbage collector of kube-controller-manager
// and the operator installed from the chart (its RBAC included): the
// holder cannot give a protected ConfigMap an unlabelled owner, which
// anyone (a holder of an older grant among them) could delete to have the
// garbage collector delete the protected object. An owner protected by the
// same FencedLease is accepted, and deleting it, by the holder with its
// current fence, cascades: the garbage collector's delete of the protected
// child is admitted.
func TestDeletingAnUnprotectedOwnerCannotDeleteAProtectedObject(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorkspace(t, false)
	g.Expect(admin.Create(ctx, w.deployment(2, gatedRollout))).To(Succeed())
	h, fence := w.holder()
	asHolder, err := testenv.PodClient(ctx, cl.RestConfig, h)
	g.Expect(err).NotTo(HaveOccurred())
	protected := func(name string, owner *corev1.ConfigMap) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name,
			Labels:      map[string]string{fencingv1alpha1.LabelProtectedBy: app},
			Annotations: map[string]string{fencingv1alpha1.AnnotationFence: record.FormatFence(fence)}}}
		if owner != nil {
			cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}
		}
		return cm
	}

	parent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "parent"}}
	g.Expect(admin.Create(ctx, parent)).To(Succeed())
	err = asHolder.Create(ctx, protected("child", parent))
	g.Expect(err).To(MatchError(ContainSubstring(fmt.Sprintf(`%sConfigMap %s/child: owner ConfigMap parent (uid %s) is not protected by FencedLease %q`,
		denied, w.ns, parent.UID, app))))

	// A protected ConfigMap as owner needs the operator to read ConfigMaps,
	// which it does not by default (docs/security.md): granted here as a
	// user would (docs/fencing.md, "Owners").
	grantOwnerReads(t, ctx)
	owner := protected("owner", nil)
	g.Expect(asHolder.Create(ctx, owner)).To(Succeed())
	g.Expect(asHolder.Create(ctx, protected("child", owner))).To(Succeed())
	// The holder deletes the owner it last wrote with its fence; the
	// garbage collector deletes the child.
	g.Expect(asHolder.Delete(ctx, owner, client.Preconditions{ResourceVersion: ptr.To(owner.ResourceVersion)})).To(Succeed())
	g.Eventually(func() bool {
		err := admin.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "child"}, &corev1.ConfigMap{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(timeout).WithPolling(poll).Should(BeTrue(), "the garbage collector deletes the protected child of a deleted protected owner")
}

// grantOwnerReads lets the operator's service account get ConfigMaps, for
// the metadata of protected ConfigMaps that own protected objects.
func grantOwnerReads(t *testing.T, ctx context.Context) {
	g := NewWithT(t)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-fencedlease-owner-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: "fencedlease-controller-manager"}}}
	g.Expect(admin.Create(ctx, role)).To(Succeed())
	g.Expect(admin.Create(ctx, binding)).To(Succeed())
	t.Cleanup(func() { _ = admin.Delete(context.Background(), binding); _ = admin.Delete(context.Background(), role) })
}
