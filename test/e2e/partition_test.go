//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/cluster"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestPartitionedHolderStopsOnItsOwnClockOnARealKubelet (design.md, "Holder renewal", the
// seeds' holder state machine, on real containers): with holder renewal,
// the holder pod's fence run reaches the API server through a proxy the
// test controls (its own service-account directory, FENCE_SERVICEACCOUNT_DIR,
// with the proxy's CA and the pod's projected token). The proxy then holds
// every request, a silent partition: fence run can no longer renew, and
// stops its work by its own deadline; the operator grants the other pod
// once the grant has expired, at once (Immediate). From the container
// runtime's log times: the old holder's work wrote its last line before
// its last renewal plus the lease, and before the new holder's work
// started. The margins are logged. A fence run that follows its files
// instead (--renewal operator) stops only once the kubelet has written the
// demotion, after the grant's end: the first check fails for it.
func TestPartitionedHolderStopsOnItsOwnClockOnARealKubelet(t *testing.T) {
	needRealNode(t)
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorkspaceWith(t, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Renewal = fencingv1alpha1.RenewalHolder
		fl.Spec.LeaseDurationSeconds = 4
		// Immediate: the next grant comes as soon as the operator judges the
		// old one expired, with no Safe wait to cover for a holder that
		// stops late. Only the holder's own clock keeps the two apart.
		fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
	})
	w.bindRenewer(t)
	proxy, err := testenv.StartAPIProxy(cl.RestConfig)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(proxy.Close)
	u, err := url.Parse(proxy.Host())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "proxy-ca"},
		Data: map[string]string{"ca.crt": string(proxy.CAData())}})).To(Succeed())

	script := `exec /fence run --renewal holder --grace-period 1s -- /bin/sh -c 'echo "started $FENCE_TOKEN"; trap "echo stopped by TERM; exit 0" TERM; while :; do echo "work $FENCE_TOKEN"; sleep 0.05; done'`
	a := w.realPodWith(t, "partitioned-a", script, func(p *corev1.Pod) {
		throughProxy(p, u.Hostname(), u.Port())
	})
	// A first grant the holder could not renew in time (its container
	// starting) expires, and the next carries another fence: wait for the
	// work started with the fence that is current.
	var fence int64
	g.Eventually(func(g Gomega) {
		h, f, ok, err := cluster.Holder(ctx, admin, w.ns, app)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ok).To(BeTrue())
		g.Expect(h.Name).To(Equal(a.Name), "the only candidate holds")
		g.Expect(podLog(a)).To(ContainSubstring(fmt.Sprintf("started %d\n", f)))
		fence = f
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed(), "fence run starts the work once it has renewed through the proxy")
	b := w.realPod(t, "direct-b", script)

	cut := time.Now()
	proxy.StallAll()
	// The last renewal that reached the API server: one sent just before
	// the cut may still be applied, its answer held.
	time.Sleep(500 * time.Millisecond)
	lease := &coordinationv1.Lease{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: app}, lease)).To(Succeed())
	g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
	deadline := lease.Spec.RenewTime.Add(4 * time.Second)
	_, fence2 := w.holder(a)
	g.Expect(fence2).To(BeNumerically(">", fence))
	// The other pod's work starts with the next fence.
	started := w.logLine(t, b, fmt.Sprintf("started %d", fence2))

	var last time.Time
	lines, err := cl.ContainerLogLines(realNode, a, "work")
	g.Expect(err).NotTo(HaveOccurred())
	for _, l := range lines {
		if strings.HasPrefix(l.Text, "work ") || strings.HasPrefix(l.Text, "stopped") {
			last = l.Time
		}
	}
	g.Expect(lines).To(ContainElement(HaveField("Text", "stopped by TERM")), "fence run stopped the work on its own clock")
	g.Expect(last.Before(deadline)).To(BeTrue(), "the partitioned holder's work wrote at %s, past its grant's end at %s (its last renewal plus the lease)", last, deadline)
	g.Expect(last.Before(started)).To(BeTrue(), "the partitioned holder's work wrote at %s, after the next holder's started at %s", last, started)
	t.Logf("partitioned at %s: the old holder's work stopped %s after the cut, %s before its last renewal plus the lease, %s before the next holder's work started (lease 4 s, Immediate)",
		cut.Format("15:04:05.000"), last.Sub(cut).Round(time.Millisecond), deadline.Sub(last).Round(time.Millisecond), started.Sub(last).Round(time.Millisecond))
}

// throughProxy makes the pod's fence run reach the API server at host:port
// with the proxy's CA: a service-account directory of its own (the pod's
// projected token, its namespace, the proxy-ca ConfigMap).
func throughProxy(p *corev1.Pod, host, port string) {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "fence-sa", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3600)}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "proxy-ca"},
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		}}}})
	c := &p.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "fence-sa", MountPath: "/var/run/fence-sa"})
	for i := range c.Env {
		switch c.Env[i].Name {
		case "KUBERNETES_SERVICE_HOST":
			c.Env[i].Value = host
		case "KUBERNETES_SERVICE_PORT":
			c.Env[i].Value = port
		}
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: "FENCE_SERVICEACCOUNT_DIR", Value: "/var/run/fence-sa"})
}

// bindRenewer lets the workspace's pods renew their own Lease, with the
// rules of the shipped workload role (config/rbac/workload_role.yaml) in a
// Role of the workspace's namespace.
func (w *workspace) bindRenewer(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	workload, err := testenv.WorkloadRole()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(admin.Create(context.Background(), &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "renewer"},
		Rules: workload.Rules})).To(Succeed())
	g.Expect(admin.Create(context.Background(), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "renewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "renewer"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: w.ns, Name: "default"}}})).To(Succeed())
}
