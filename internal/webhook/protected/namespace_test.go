package protected_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// kubeControllerManager is built by 'hack/tools.sh cluster' next to the
// envtest binaries.
func kubeControllerManager(t *testing.T) string {
	bin := filepath.Join(harness.ControlPlaneDir(), "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run 'hack/tools.sh cluster' (make builds it) first", bin)
	}
	return bin
}

// TestNamespaceDeletionCompletes runs the real namespace controller of
// kube-controller-manager (as system:kube-controller-manager, without
// per-controller service accounts) and deletes a namespace holding protected
// ConfigMaps and Secrets: the webhook lets the cleanup through and the
// namespace goes away.
func TestNamespaceDeletionCompletes(t *testing.T) {
	f := newFixture(t)
	bin := kubeControllerManager(t)
	f.startOperator(testenv.ManagerOptions{})
	f.fencedLease("db")
	// The Lease carries the operator's finalizer, which the deletion of the
	// namespace must get past too.
	f.g.Eventually(func(g Gomega) {
		l := &coordinationv1.Lease{}
		g.Expect(f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "db"}, l)).To(Succeed())
		g.Expect(l.Finalizers).To(ContainElement(fencingv1alpha1.LeaseFinalizer))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	f.g.Expect(f.operator.Create(f.ctx, f.configMap("state", "db", "", "v1"))).To(Succeed())
	f.g.Expect(f.operator.Create(f.ctx, f.secret("creds", "db", "", "s1"))).To(Succeed())
	f.g.Expect(f.operator.Create(f.ctx, f.configMap("orphan", "gone", "", "v1"))).To(Succeed())

	au, err := env.AddUser(envtest.User{Name: "system:kube-controller-manager", Groups: []string{"system:masters"}}, nil)
	f.g.Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := au.KubeConfig()
	f.g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(t.TempDir(), "kubeconfig")
	f.g.Expect(os.WriteFile(path, kubeconfig, 0o600)).To(Succeed())
	var out bytes.Buffer
	kcm := exec.Command(bin, "--kubeconfig="+path, "--leader-elect=false", "--secure-port=0",
		"--controllers=namespace-controller,garbage-collector-controller", "--use-service-account-credentials=false",
		"--concurrent-namespace-syncs=2")
	kcm.Stdout, kcm.Stderr = &out, &out
	f.g.Expect(kcm.Start()).To(Succeed())
	exited := make(chan error, 1)
	go func() { exited <- kcm.Wait() }()
	t.Cleanup(func() {
		_ = kcm.Process.Kill()
		err := <-exited
		if t.Failed() {
			t.Logf("kube-controller-manager exited (%v); output:\n%s", err, out.String())
		}
	})

	// Orphaning: deleting the owner of a protected ConfigMap with
	// propagationPolicy Orphan makes the garbage collector UPDATE the
	// dependent to drop its ownerReference; that must get through, or the
	// owner's deletion hangs.
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "owner"}}
	f.g.Expect(f.c.Create(f.ctx, owner)).To(Succeed())
	owned := f.configMap("owned", "db", "", "v1")
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}
	f.g.Expect(f.operator.Create(f.ctx, owned)).To(Succeed())
	f.g.Expect(f.c.Delete(f.ctx, owner, client.PropagationPolicy(metav1.DeletePropagationOrphan))).To(Succeed())
	f.g.Eventually(func() bool {
		return apierrors.IsNotFound(f.c.Get(f.ctx, client.ObjectKeyFromObject(owner), &corev1.ConfigMap{}))
	}).WithTimeout(60*time.Second).WithPolling(250*time.Millisecond).Should(BeTrue(), "the orphaning owner was not deleted")
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(owned), owned)).To(Succeed())
	f.g.Expect(owned.OwnerReferences).To(BeEmpty())
	f.g.Expect(owned.Labels).To(HaveKeyWithValue(fencingv1alpha1.LabelProtectedBy, "db"))

	ns := &corev1.Namespace{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Name: f.ns}, ns)).To(Succeed())
	f.g.Expect(f.c.Delete(f.ctx, ns)).To(Succeed())
	f.g.Eventually(func(g Gomega) bool {
		select {
		case err := <-exited:
			exited <- err
			g.Expect(err).NotTo(HaveOccurred(), "kube-controller-manager exited")
			g.Expect("exited").To(BeEmpty(), "kube-controller-manager exited")
		default:
		}
		return apierrors.IsNotFound(f.c.Get(f.ctx, types.NamespacedName{Name: f.ns}, ns))
	}).WithTimeout(90*time.Second).WithPolling(250*time.Millisecond).Should(BeTrue(),
		"namespace %s was not deleted: %+v", f.ns, ns.Status)
	f.g.Expect(decisions(map[string]string{"result": "allowed", "reason": "system_cleanup"})).To(BeNumerically(">=", 3))
}
